package keyfilter

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Filter.
type Config struct {
	// TTL is how long a key is remembered; it must be the key TTL of the
	// engine (recovery.Config.KeyTTL). Default 24h.
	TTL time.Duration
	// Slices is how many time slices are live at once, 2 to 64. A slice
	// covers TTL/(Slices-1) of time, and a key is remembered for between
	// TTL and TTL plus one slice; see the package comment. In the blocked
	// layout a check reads a cache line per slice, side by side. Default 4.
	Slices int
	// ExpectedKeysPerSlice is how many keys arrive in one slice's time,
	// that is the keys per TTL divided by Slices-1. Default 1<<20.
	ExpectedKeysPerSlice uint
	// FalsePositiveRate is the target fraction of new keys a check reports
	// as "maybe seen", with every live slice at its expected load; each
	// slice is sized for FalsePositiveRate/Slices. Default 0.005: one new
	// key in 200 takes the careful path (issue 29 relaxed it from 0.1 %, so
	// that the filter fits in 2.5 bytes per live key).
	FalsePositiveRate float64
	// Layout is how the bits are stored. Default LayoutBlocked.
	Layout Layout
	// Disabled turns the filter off: every check answers "maybe seen", and
	// no bits are allocated.
	Disabled bool
	// Now, when set, is the clock used instead of the system's, for tests.
	Now func() time.Time
	// Registry, when set, receives the filter's metrics.
	Registry prometheus.Registerer
}

// Layout is how a Filter stores its bits.
type Layout int

const (
	// LayoutBlocked keeps an element's bits for each slice in one 64-byte
	// cache line, the slices' lines side by side, so that a check hashes
	// once and reads Slices adjacent lines, and an add writes one. It
	// hashes with xxhash and a seed that a snapshot keeps.
	LayoutBlocked Layout = iota
	// LayoutBloomV3 is a bits-and-blooms/bloom/v3 filter per slice, bit for
	// bit: bloom/v3's sizing, hash and bit positions (its own Test answers
	// the same). It is the baseline the blocked layout is measured against.
	LayoutBloomV3
)

func (l Layout) String() string {
	switch l {
	case LayoutBlocked:
		return "blocked"
	case LayoutBloomV3:
		return "bloomv3"
	default:
		return fmt.Sprintf("Layout(%d)", int(l))
	}
}

// Filter remembers which idempotency keys were added in the last TTL. A nil
// *Filter is a disabled one. It is safe for concurrent use.
type Filter struct {
	cfg    Config
	period time.Duration // one slice's time: TTL/(Slices-1), rounded up
	now    func() int64  // the clock, in nanoseconds since 1970
	slots  slots         // nil when disabled
	// gen is the number of the newest slice: the clock's time divided by the
	// period, the largest seen. Slice g lives in slot g mod Slices.
	gen   atomic.Int64
	end   atomic.Int64 // when the newest slice's time ends, in nanoseconds
	ready atomic.Bool  // a Rebuild finished: the bits know every live key
	// covers is the time, in nanoseconds by the rows' clock, before which
	// every live key is known to be in the bits (SetCovers); 0 for none.
	covers atomic.Int64
	mu     sync.Mutex // serializes rotations
	count  *[stripes]stripe
	fps    prometheus.Counter
}

// New returns a Filter. It is cold, answering "maybe seen" to every check,
// until Rebuild has loaded the keys still alive.
func New(cfg Config) (*Filter, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.Slices == 0 {
		cfg.Slices = 4
	}
	if cfg.ExpectedKeysPerSlice == 0 {
		cfg.ExpectedKeysPerSlice = 1 << 20
	}
	if cfg.FalsePositiveRate == 0 {
		cfg.FalsePositiveRate = 0.005
	}
	switch {
	case cfg.TTL < 0:
		return nil, fmt.Errorf("keyfilter: TTL %s is negative", cfg.TTL)
	case cfg.Slices < 2 || cfg.Slices > 64:
		return nil, fmt.Errorf("keyfilter: Slices is %d, want 2 to 64", cfg.Slices)
	case !(cfg.FalsePositiveRate >= 1e-9 && cfg.FalsePositiveRate < 1):
		// Below 1e-9 a slice would need more than 64 hash functions.
		return nil, fmt.Errorf("keyfilter: FalsePositiveRate is %g, want 1e-9 to 1", cfg.FalsePositiveRate)
	case cfg.Layout != LayoutBlocked && cfg.Layout != LayoutBloomV3:
		return nil, fmt.Errorf("keyfilter: unknown %s", cfg.Layout)
	}
	n := time.Duration(cfg.Slices - 1)
	f := &Filter{cfg: cfg, period: (cfg.TTL + n - 1) / n, now: clockOf(cfg.Now), count: new([stripes]stripe)}
	f.fps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "payments_keyfilter_false_positives_total",
		Help: "Checks that answered maybe seen for a key the database did not have.",
	})
	if !cfg.Disabled {
		perSlice := cfg.FalsePositiveRate / float64(cfg.Slices)
		if cfg.Layout == LayoutBloomV3 {
			f.slots = newBloomV3(cfg.Slices, cfg.ExpectedKeysPerSlice, perSlice)
		} else {
			f.slots = newBlocked(cfg.Slices, cfg.ExpectedKeysPerSlice, perSlice)
		}
		f.publish(f.genAt(f.now()))
	}
	if err := f.register(cfg.Registry); err != nil {
		return nil, err
	}
	return f, nil
}

// MaybeSeen reports whether the user's key may have been added in the last
// TTL. False means definitely not: the claim may go straight to an insert.
// A nil, disabled or cold filter answers true.
func (f *Filter) MaybeSeen(userID int64, key string) bool {
	if f == nil || !f.ready.Load() {
		return true
	}
	maybe, h := f.slots.test(userID, key)
	f.counted(maybe, h)
	return maybe
}

// CheckAndAdd answers what MaybeSeen would have, and adds the key, hashing
// it once. Adding before the claim commits is safe: should the claim fail,
// the key is only a false positive.
func (f *Filter) CheckAndAdd(userID int64, key string) (maybeSeen bool) {
	if f == nil || f.slots == nil {
		return true
	}
	maybe, h := f.slots.testAndAdd(f.slot(f.rotate()), userID, key)
	if !f.ready.Load() {
		return true
	}
	f.counted(maybe, h)
	return maybe
}

// Add records that the user's key was seen now. A nil or disabled filter
// ignores it.
func (f *Filter) Add(userID int64, key string) {
	if f == nil || f.slots == nil {
		return
	}
	f.slots.add(f.slot(f.rotate()), userID, key)
}

// ReportFalsePositive counts a check that answered "maybe seen" for a key
// the database then did not have.
// A cold filter answers "maybe" without looking at its bits, so its answers
// are not the filter's false positives and are not counted.
func (f *Filter) ReportFalsePositive() {
	if f == nil || f.slots == nil || !f.ready.Load() {
		return
	}
	f.fps.Inc()
}

// Rotate drops the slices whose keys are all older than the TTL by the
// clock. Add and CheckAndAdd rotate as needed; a caller may also call Rotate
// from a ticker so that expiry does not wait for the next Add. Until a
// rotation, an expired slice only makes checks answer "maybe seen" more.
func (f *Filter) Rotate() {
	if f == nil || f.slots == nil {
		return
	}
	f.rotate()
}

// rotate moves the newest slice up to the clock's and returns its number.
func (f *Filter) rotate() int64 {
	ns := f.now()
	// end is read before gen and both only grow, so gen is at least the
	// slice that end closes: a slice the clock has reached.
	if ns < f.end.Load() {
		return f.gen.Load() // within the newest slice, or the clock went back
	}
	g := f.genAt(ns)
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.gen.Load()
	// Slice cur+i takes the slot of slice cur+i-Slices, which is no longer
	// live: its keys were all added before (cur+i-Slices+1)*period, at least
	// (Slices-1)*period >= TTL ago. Each slot is cleared before the new
	// generation number is published, so no key lands in a slot being cleared
	// but one that is itself past the TTL.
	for next := cur + 1; next <= g && next <= cur+int64(f.cfg.Slices); next++ {
		f.slots.clear(f.slot(next))
	}
	if g > cur {
		f.publish(g)
	}
	return f.gen.Load()
}

func (f *Filter) publish(g int64) {
	f.gen.Store(g)
	f.end.Store((g + 1) * int64(f.period))
}

// A Row is one stored key, as Rebuild reads it.
type Row struct {
	UserID int64
	Key    string
	// LiveFrom is when the key's last TTL began: its first claim, or, for
	// one that finished later, its finish (a key lives a TTL after its
	// answer was stored). An unfinished key lives on: give it now.
	LiveFrom time.Time
}

// Scanner is what ScanRows reads: pgx.Rows is one.
type Scanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanRows streams rows of (user_id, idempotency_key, created_at) into
// Rebuild, one at a time. The caller closes them.
func ScanRows(rows Scanner) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		for rows.Next() {
			var r Row
			err := rows.Scan(&r.UserID, &r.Key, &r.LiveFrom)
			if !yield(r, err) || err != nil {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(Row{}, err)
		}
	}
}

// RebuildStats says what a Rebuild read.
type RebuildStats struct {
	Added   int // keys placed in the slice of their LiveFrom time
	Expired int // keys skipped: live from at least TTL ago
}

// Rebuild adds the stored keys still alive, streamed from rows (say, from
// SELECT user_id, idempotency_key, live_from FROM idempotency_keys WHERE
// expires_at IS NULL OR expires_at > now()), each into the slice of its
// LiveFrom time; a key live from at least TTL ago is skipped, and one live
// from after the filter's clock (the database's clock runs ahead) counts
// as live from now. When it
// returns without error the filter is ready: checks may answer "definitely
// new". Adds and checks may run meanwhile; the filter stays cold until then.
func (f *Filter) Rebuild(ctx context.Context, rows iter.Seq2[Row, error]) (RebuildStats, error) {
	var st RebuildStats
	if f == nil || f.slots == nil {
		return st, nil
	}
	now := time.Unix(0, f.now())
	f.rotate()
	oldest, live := now.Add(-f.cfg.TTL), int64(f.cfg.Slices)
	for row, err := range rows {
		if err != nil {
			return st, fmt.Errorf("keyfilter: reading keys: %w", err)
		}
		if (st.Added+st.Expired)%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		g, cur := f.genAt(row.LiveFrom.UnixNano()), f.gen.Load()
		if g > cur {
			g = cur
		}
		// The second test catches a slice dropped since the rebuild began.
		if !row.LiveFrom.After(oldest) || g <= cur-live {
			st.Expired++
			continue
		}
		f.slots.add(f.slot(g), row.UserID, row.Key)
		st.Added++
	}
	f.ready.Store(true)
	return st, nil
}

// Stats describes a filter's memory and load.
type Stats struct {
	Enabled     bool
	Ready       bool // a Rebuild finished
	Layout      Layout
	Slices      int
	SlicePeriod time.Duration
	// Newest is when the newest slice's time began.
	Newest        time.Time
	HashFunctions int
	BitsPerSlice  uint64
	// FillRatios are the fractions of bits set per slice, newest first.
	FillRatios []float64
	// EstimatedFalsePositiveRate is the chance that a check of a new key
	// answers "maybe seen", given the bits now set.
	EstimatedFalsePositiveRate float64
	Bytes                      int
}

// Stats reads the whole filter: it takes about a millisecond per 10 MB.
func (f *Filter) Stats() Stats {
	if f == nil || f.slots == nil {
		return Stats{}
	}
	gen := f.gen.Load()
	st := Stats{
		Enabled:                    true,
		Ready:                      f.ready.Load(),
		Layout:                     f.cfg.Layout,
		Slices:                     f.cfg.Slices,
		SlicePeriod:                f.period,
		Newest:                     time.Unix(0, gen*int64(f.period)),
		HashFunctions:              f.slots.hashes(),
		BitsPerSlice:               f.slots.bitsPerSlot(),
		EstimatedFalsePositiveRate: f.slots.falsePositiveRate(),
		Bytes:                      f.slots.bytes(),
	}
	for i := range int64(f.cfg.Slices) {
		st.FillRatios = append(st.FillRatios, f.slots.fill(f.slot(gen-i)))
	}
	return st
}

// genAt is the number of the slice whose time holds ns.
func (f *Filter) genAt(ns int64) int64 {
	p := int64(f.period)
	g := ns / p
	if ns%p < 0 {
		g--
	}
	return g
}

// clockOf returns now as nanoseconds since 1970. The system's clock is the
// wall clock at New plus the monotonic time since: one clock read instead of
// time.Now's two (an Add spends ~25 ns instead of ~46 ns on it here), and a
// step of the wall clock never moves it. It can only fall behind the wall
// clock (while the machine sleeps), which keeps keys longer, never shorter.
func clockOf(now func() time.Time) func() int64 {
	if now != nil {
		return func() int64 { return now().UnixNano() }
	}
	start := time.Now()
	wall := start.UnixNano()
	return func() int64 { return wall + int64(time.Since(start)) }
}

// slot is where slice g lives.
func (f *Filter) slot(g int64) int {
	s := int(g % int64(f.cfg.Slices))
	if s < 0 { // before 1970
		s += f.cfg.Slices
	}
	return s
}

// slots is a layout: Slices bit arrays of one size, addressed by slot.
type slots interface {
	// test reports whether the element's bits are all set in some slot,
	// and returns a hash of the element for striping counters.
	test(userID int64, key string) (maybe bool, hash uint64)
	add(slot int, userID int64, key string)
	testAndAdd(slot int, userID int64, key string) (maybe bool, hash uint64)
	clear(slot int)
	fill(slot int) float64
	falsePositiveRate() float64
	hashes() int
	bitsPerSlot() uint64
	bytes() int
}

// Element is the filter's element for a user's key: the user id as 8 bytes
// big-endian, then the key. The fixed-width prefix makes it unambiguous: no
// two (user, key) pairs have the same element.
func Element(userID int64, key string) []byte {
	return appendElement(make([]byte, 0, 8+len(key)), userID, key)
}

// elementBuf holds the element of the longest key the API accepts (255
// bytes) on the stack; a longer one still works, on the heap.
const elementBuf = 8 + 256

func appendElement(dst []byte, userID int64, key string) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(userID))
	return append(dst, key...)
}

func (f *Filter) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	collectors := []prometheus.Collector{
		f.fps,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "payments_keyfilter_checks_total",
			Help: "Checks answered by the key filter's bits.",
		}, func() float64 { m, n := f.counts(); return float64(m + n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "payments_keyfilter_definitely_new_total",
			Help: "Checks that answered definitely new, letting the claim skip its lookup.",
		}, func() float64 { _, n := f.counts(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payments_keyfilter_fill_ratio",
			Help: "Fraction of bits set in the key filter's newest slice.",
		}, f.newestFill),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payments_keyfilter_estimated_false_positive_rate",
			Help: "Estimated chance that a check of a new key answers maybe seen, from the bits set.",
		}, f.estimatedFalsePositiveRate),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("keyfilter: registering metrics: %w", err)
		}
	}
	return nil
}

func (f *Filter) newestFill() float64 {
	if f.slots == nil {
		return 0
	}
	return f.slots.fill(f.slot(f.gen.Load()))
}

func (f *Filter) estimatedFalsePositiveRate() float64 {
	if f.slots == nil {
		return 0
	}
	return f.slots.falsePositiveRate()
}

// The check counters are striped by the element's hash, so that checks on
// different cores rarely write the same cache line; each check increments
// one word.
const stripes = 16

type stripe struct {
	maybe, definitelyNew atomic.Uint64
	_                    [48]byte
}

func (f *Filter) counted(maybe bool, hash uint64) {
	s := &f.count[hash%stripes]
	if maybe {
		s.maybe.Add(1)
	} else {
		s.definitelyNew.Add(1)
	}
}

func (f *Filter) counts() (maybe, definitelyNew uint64) {
	for i := range f.count {
		maybe += f.count[i].maybe.Load()
		definitelyNew += f.count[i].definitelyNew.Load()
	}
	return maybe, definitelyNew
}
