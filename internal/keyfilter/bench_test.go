package keyfilter

import (
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/bits-and-blooms/bloom/v3"
)

// The benchmarks hold 10 million live keys (a 24-hour TTL's worth) in each
// design, at one target false-positive rate for a whole check, 0.5 % (the
// default since issue 29):
//
//   - blocked-4, blocked-3: this package's default layout, 4 (or 3) slices;
//   - bloomv3-4, bloomv3-24: this package with the bloom/v3 layout, 4 (or
//     24) slices, hashed once per check;
//   - naive-24: 24 hourly bloom/v3 filters, each asked in turn with its own
//     Test (which hashes again), each sized for 1/24 of the rate;
//   - single: one bloom/v3 filter of 10 million keys at 0.5 %, not
//     time-sliced, the point of reference.
//
// The sliced designs are filled to the worst case, every live slice at its
// expected load (just before the oldest is dropped). The structures are
// built once, on first use, and only by benchmarks: building them takes
// seconds and a few hundred megabytes.
const (
	liveKeys  = 10_000_000
	benchRate = 0.005
)

var designs = []string{"blocked-4", "blocked-3", "bloomv3-4", "bloomv3-24", "naive-24", "single"}

// A design is one way of remembering keys, for comparison.
type design interface {
	maybeSeen(userID int64, key string) bool
	add(userID int64, key string)
	checkAndAdd(userID int64, key string) bool
	nextSlice() // moves time to the next slice, dropping the oldest
	slices() int
	bytes() int
}

func newDesign(name string) design {
	switch name {
	case "blocked-4":
		return newSliced(LayoutBlocked, 4)
	case "blocked-3":
		return newSliced(LayoutBlocked, 3)
	case "bloomv3-4":
		return newSliced(LayoutBloomV3, 4)
	case "bloomv3-24":
		return newSliced(LayoutBloomV3, 24)
	case "naive-24":
		n := &naive{}
		for range 24 {
			n.filters = append(n.filters, bloom.NewWithEstimates(liveKeys/24, benchRate/24))
		}
		return n
	case "single":
		return &naive{filters: []*bloom.BloomFilter{bloom.NewWithEstimates(liveKeys, benchRate)}}
	}
	panic(name)
}

// sliced is this package's Filter on a clock that moves one slice at a time.
type sliced struct {
	*Filter
	now   time.Time
	start time.Time // a monotonic reading, as the system clock's
}

func newSliced(layout Layout, slices int) *sliced {
	s := &sliced{now: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), start: time.Now()}
	f, err := New(Config{
		Slices: slices, ExpectedKeysPerSlice: liveKeys / uint(slices-1), FalsePositiveRate: benchRate,
		Layout: layout,
		// The clock moves a slice at a time, on demand, but it reads the
		// system clock too, so that an add pays for a clock read as in
		// production.
		Now: func() time.Time { _ = time.Since(s.start); return s.now },
	})
	if err != nil {
		panic(err)
	}
	f.ready.Store(true) // as after a Rebuild
	s.Filter = f
	return s
}

func (s *sliced) maybeSeen(userID int64, key string) bool { return s.MaybeSeen(userID, key) }
func (s *sliced) add(userID int64, key string)            { s.Add(userID, key) }
func (s *sliced) checkAndAdd(userID int64, key string) bool {
	return s.CheckAndAdd(userID, key)
}
func (s *sliced) nextSlice()  { s.now = s.now.Add(s.period); s.Rotate() }
func (s *sliced) slices() int { return s.cfg.Slices }
func (s *sliced) bytes() int  { return s.slots.bytes() }

// naive is bloom/v3 used as it comes: a ring of filters asked one by one.
type naive struct {
	filters []*bloom.BloomFilter
	newest  int
}

func (n *naive) maybeSeen(userID int64, key string) bool {
	var buf [elementBuf]byte
	e := appendElement(buf[:0], userID, key)
	for _, f := range n.filters {
		if f.Test(e) {
			return true
		}
	}
	return false
}

func (n *naive) add(userID int64, key string) {
	var buf [elementBuf]byte
	n.filters[n.newest].Add(appendElement(buf[:0], userID, key))
}

func (n *naive) checkAndAdd(userID int64, key string) bool {
	maybe := n.maybeSeen(userID, key)
	n.add(userID, key)
	return maybe
}

func (n *naive) nextSlice() {
	n.newest = (n.newest + 1) % len(n.filters)
	n.filters[n.newest].ClearAll()
}

func (n *naive) slices() int { return len(n.filters) }
func (n *naive) bytes() int {
	return len(n.filters) * len(n.filters[0].BitSet().Words()) * 8
}

// perSlice is how many keys one slice of d takes: 10 million over the
// slices that cover the TTL.
func perSlice(d design) int {
	if s, ok := d.(*sliced); ok {
		return liveKeys / (s.slices() - 1)
	}
	return liveKeys / d.slices()
}

// benchKey is key number i: a user id spread over 62 bits and a 36-byte
// key, so an element is 44 bytes, as with a UUID. Keys below 1<<40 are
// the ones filled in; the others were never added.
func benchKey(i uint64) (int64, string) {
	return int64(mix(i) >> 2), uuids[i%uint64(len(uuids))]
}

var uuids = func() (u [64]string) {
	for i := range u {
		x, y := mix(uint64(i)+1<<50), mix(uint64(i)+1<<51)
		u[i] = fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", uint32(x), uint16(x>>32), x>>52, uint16(y)&0xfff, y>>16)
	}
	return u
}()

// mix is SplitMix64's finalizer, a bijection.
func mix(x uint64) uint64 {
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

var (
	filledMu sync.Mutex
	filled   = map[string]design{}
)

// full returns design name filled with 10 million live keys, built once.
func full(b *testing.B, name string) (design, int) {
	filledMu.Lock()
	defer filledMu.Unlock()
	d, ok := filled[name]
	if !ok {
		start := time.Now()
		d = newDesign(name)
		per, n := perSlice(d), 0
		for range d.slices() {
			for range per {
				d.add(benchKey(uint64(n)))
				n++
			}
			if n < per*d.slices() {
				d.nextSlice()
			}
		}
		filled[name] = d
		b.Logf("%s: %d keys in %d slices, %d MiB, built in %s", name, n, d.slices(), d.bytes()>>20, time.Since(start).Round(time.Millisecond))
	}
	return d, perSlice(d) * d.slices()
}

func BenchmarkCheckMember(b *testing.B) {
	for _, name := range designs {
		b.Run(name, func(b *testing.B) {
			d, keys := full(b, name)
			var i uint64
			for b.Loop() {
				i++
				if !d.maybeSeen(benchKey(mix(i) % uint64(keys))) {
					b.Fatal("a false negative")
				}
			}
			b.ReportMetric(float64(d.bytes())/liveKeys, "bytes/key")
		})
	}
}

func BenchmarkCheckNonMember(b *testing.B) {
	for _, name := range designs {
		b.Run(name, func(b *testing.B) {
			d, _ := full(b, name)
			var i, maybe uint64
			for b.Loop() {
				i++
				if d.maybeSeen(benchKey(1<<40 + i)) {
					maybe++
				}
			}
			b.ReportMetric(float64(d.bytes())/liveKeys, "bytes/key")
			b.ReportMetric(float64(maybe)/float64(i)*100, "fp%")
		})
	}
}

// BenchmarkCheckLatency checks members one after the other, each key
// chosen by the previous answer, so that no two checks overlap: the time of
// a check between other work, where the loops above measure back-to-back
// checks whose memory reads the processor overlaps.
func BenchmarkCheckLatency(b *testing.B) {
	for _, name := range []string{"blocked-4", "blocked-3", "bloomv3-4", "single"} {
		b.Run(name, func(b *testing.B) {
			d, keys := full(b, name)
			var i uint64
			for b.Loop() {
				seen := d.maybeSeen(benchKey(mix(i) % uint64(keys)))
				// Always 2, but through the answer's byte, not a branch the
				// processor could predict and run ahead of.
				i += 1 + uint64(*(*uint8)(unsafe.Pointer(&seen)))
			}
			b.ReportMetric(float64(d.bytes())/liveKeys, "bytes/key")
		})
	}
}

// BenchmarkAdd adds new keys to a full-size filter, moving to the next
// slice whenever the current one has its expected load, as in production.
// (An add touches only the newest slice, so the older ones stay empty.)
func BenchmarkAdd(b *testing.B) {
	for _, name := range designs {
		b.Run(name, func(b *testing.B) { benchmarkAdd(b, name, design.add) })
	}
}

// BenchmarkCheckAndAdd is what a claim of a new key costs: the check that
// answers "definitely new" and the add, hashed once (the naive baseline
// hashes again).
func BenchmarkCheckAndAdd(b *testing.B) {
	for _, name := range designs {
		b.Run(name, func(b *testing.B) {
			benchmarkAdd(b, name, func(d design, userID int64, key string) { d.checkAndAdd(userID, key) })
		})
	}
}

func benchmarkAdd(b *testing.B, name string, add func(d design, userID int64, key string)) {
	d := newDesign(name)
	per := perSlice(d)
	var i uint64
	for b.Loop() {
		i++
		user, key := benchKey(1<<41 + i)
		add(d, user, key)
		if i%uint64(per) == 0 {
			b.StopTimer()
			d.nextSlice()
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(d.bytes())/liveKeys, "bytes/key")
}

// BenchmarkCheckParallel checks members from every core at once: the
// checks share nothing they write but striped counters, so the time per
// check falls with the cores.
func BenchmarkCheckParallel(b *testing.B) {
	d, keys := full(b, "blocked-4")
	b.RunParallel(func(pb *testing.PB) {
		i := mix(uint64(time.Now().UnixNano()))
		for pb.Next() {
			i++
			if !d.maybeSeen(benchKey(mix(i) % uint64(keys))) {
				panic("a false negative")
			}
		}
	})
}

// BenchmarkDRAMRead is the yardstick of a check, in the same run: random
// reads of one word in an array far bigger than the caches (256 MiB), and
// in one the size of blocked-4's bits. latency reads each word at the
// index the previous one held (a random cycle), as BenchmarkCheckLatency
// chains checks; independent reads at indexes known in advance, whose
// misses the processor overlaps, as the loops of BenchmarkCheckMember do.
func BenchmarkDRAMRead(b *testing.B) {
	filterBytes := newBlockedSize(LayoutBlocked, 4)
	for _, c := range []struct {
		name  string
		bytes int
	}{{"256MiB", 256 << 20}, {"filter-size", filterBytes}} {
		b.Run("latency-"+c.name, func(b *testing.B) {
			a := cycle(c.bytes / 8)
			var i uint64
			for b.Loop() {
				i = a[i]
			}
			sink = i
		})
		b.Run("independent-"+c.name, func(b *testing.B) {
			a := cycle(c.bytes / 8)
			var i, sum uint64
			for b.Loop() {
				i++
				sum += a[mix(i)%uint64(len(a))]
			}
			sink = sum
		})
	}
}

var sink uint64

// newBlockedSize is the bytes of the sliced design's bits at 10 million
// live keys, without filling them.
func newBlockedSize(layout Layout, slices int) int {
	f, err := New(Config{Slices: slices, ExpectedKeysPerSlice: liveKeys / uint(slices-1), FalsePositiveRate: benchRate, Layout: layout})
	if err != nil {
		panic(err)
	}
	return f.slots.bytes()
}

var (
	cyclesMu sync.Mutex
	cycles   = map[int][]uint64{}
)

// cycle returns n words that make one random cycle through all of them
// (Sattolo's algorithm), built once per size.
func cycle(n int) []uint64 {
	cyclesMu.Lock()
	defer cyclesMu.Unlock()
	if a, ok := cycles[n]; ok {
		return a
	}
	a := make([]uint64, n)
	for i := range a {
		a[i] = uint64(i)
	}
	for i := n - 1; i > 0; i-- {
		j := int(mix(uint64(i)) % uint64(i))
		a[i], a[j] = a[j], a[i]
	}
	cycles[n] = a
	return a
}
