package keyfilter

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// blocked is the default layout. The filter is an array of groups of
// Slices cache lines (64 bytes each), one line per slice, side by side: an
// element picks one group and k bits within a line, the same group and bits
// for every slice, so a check hashes once, builds one mask and reads Slices
// consecutive lines (256 bytes with 4 slices, whose loads the processor
// issues at once, from one DRAM row); an add sets bits in one line.
//
// The price of blocking is memory: for the same false-positive rate a
// blocked filter needs more bits than an unblocked one, since some blocks
// get more than their share of keys; blockedSize sizes for that exactly.
// The smaller the block, the higher the price: at 0.5 % for a check of 4
// slices, 128-bit blocks (a line shared by 4 slices, this layout until
// issue 29) need 3.01 bytes per live key, 512-bit ones 2.49.
type blocked struct {
	words  []uint64 // word w of slot s in group g: words[g*group+s*sub+w]
	n      int      // slots
	sub    int      // words per slot in a group
	group  int      // words per group: n*sub
	groups uint64
	k      int
	shift  uint   // a probe's top 64-shift bits pick one of a slot's sub*64 bits
	seed   uint64 // folded into every element's hash; a snapshot keeps it
	// fpGivenOnes[c] is the chance that k random bits of a slot's block
	// with c bits set are all set.
	fpGivenOnes []float64
}

const (
	blockWords = 8 // words per cache line
	blockBytes = blockWords * 8
	// golden is 2^64 divided by the golden ratio: multiplying by it spreads
	// a word's bits into the top ones.
	golden = 0x9E3779B97F4A7C15
)

// subWords is a slot's share of a group: a whole line.
func subWords(int) int { return blockWords }

func newBlocked(n int, keys uint, p float64) *blocked {
	sub := subWords(n)
	groups, k := blockedSize(keys, p, sub*64)
	b := &blocked{
		words:  alignedWords(int(groups) * n * sub),
		n:      n,
		sub:    sub,
		group:  n * sub,
		groups: groups,
		k:      k,
		shift:  uint(64 - bits.Len(uint(sub*64-1))),
		// A random seed per filter, replaced by a snapshot's when one is
		// loaded (the bits are only meaningful with the seed that set them).
		seed:        rand.Uint64(),
		fpGivenOnes: make([]float64, sub*64+1),
	}
	for c := range b.fpGivenOnes {
		b.fpGivenOnes[c] = math.Pow(float64(c)/float64(sub*64), float64(k))
	}
	return b
}

// probe hashes the element once: its group's first word, the mask of its
// bits within a slot's block, and the hash.
func (b *blocked) probe(userID int64, key string) (base int, mask [blockWords]uint64, h uint64) {
	// The pair's hash: the key's, with the seed and the user id folded in
	// through a bijection, so that one key of two users never collides.
	// The seed is not a secret key (it is folded in after xxhash): someone
	// who finds keys with one xxhash can make his own keys collide, which
	// only sends his own keys down the careful path more often.
	h = mix64(xxhash.Sum64String(key) ^ b.seed ^ uint64(userID)*golden)
	g, _ := bits.Mul64(h, b.groups) // the high bits of h pick the group
	// Bit i is the top bits of h times golden^(i+1), which depend on all of
	// h's bits (RocksDB's FastLocalBloom derives its probes by multiplying
	// by the same constant); the products are independent, so they run in
	// parallel.
	shift := b.shift
	for _, c := range goldenPowers[:b.k] {
		p := (h * c) >> shift
		mask[p/64] |= 1 << (p % 64)
	}
	return int(g) * b.group, mask, h
}

// goldenPowers[i] is golden^(i+1).
var goldenPowers = func() (pw [64]uint64) {
	x := uint64(golden)
	for i := range pw {
		pw[i] = x
		x *= golden
	}
	return pw
}()

// mix64 is SplitMix64's finalizer, a bijection that spreads every bit of x
// over all the bits of the result.
func mix64(x uint64) uint64 {
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

func (b *blocked) test(userID int64, key string) (bool, uint64) {
	base, mask, h := b.probe(userID, key)
	return b.testAt(base, &mask), h
}

func (b *blocked) add(slot int, userID int64, key string) {
	base, mask, _ := b.probe(userID, key)
	b.addAt(base+slot*b.sub, &mask)
}

func (b *blocked) testAndAdd(slot int, userID int64, key string) (bool, uint64) {
	base, mask, h := b.probe(userID, key)
	maybe := b.testAt(base, &mask)
	b.addAt(base+slot*b.sub, &mask)
	return maybe, h
}

// testAt reports whether some slot's block in the group has all of mask.
// It reads every slot, without branching on any: a member is found in a
// random slot, and a branch on which one would be mispredicted.
func (b *blocked) testAt(base int, mask *[blockWords]uint64) bool {
	group := b.words[base : base+b.group]
	var found uint64
	for s := 0; s < len(group); s += b.sub {
		block := group[s : s+b.sub]
		var missing uint64
		for w := range block {
			missing |= mask[w] &^ atomic.LoadUint64(&block[w])
		}
		found |= ((missing | -missing) >> 63) ^ 1 // 1 when missing == 0
	}
	return found != 0
}

// addAt sets mask in the block at i. It reads before it writes: a bit
// already set costs no locked instruction.
func (b *blocked) addAt(i int, mask *[blockWords]uint64) {
	block := b.words[i : i+b.sub]
	for w := range block {
		if m := mask[w]; m != 0 && atomic.LoadUint64(&block[w])&m != m {
			atomic.OrUint64(&block[w], m)
		}
	}
}

func (b *blocked) clear(slot int) {
	for i := slot * b.sub; i < len(b.words); i += b.group {
		for w := i; w < i+b.sub; w++ {
			if atomic.LoadUint64(&b.words[w]) != 0 {
				atomic.StoreUint64(&b.words[w], 0)
			}
		}
	}
}

func (b *blocked) fill(slot int) float64 {
	var ones int
	for i := slot * b.sub; i < len(b.words); i += b.group {
		ones += onesIn(b.words[i : i+b.sub])
	}
	return float64(ones) / float64(b.bitsPerSlot())
}

// falsePositiveRate is the chance that a new element finds its k bits in
// some slot's block, averaged over the groups: exact for the bits now set,
// block load variance included.
func (b *blocked) falsePositiveRate() float64 {
	var sum float64
	for g := 0; g < len(b.words); g += b.group {
		none := 1.0
		for s := g; s < g+b.group; s += b.sub {
			none *= 1 - b.fpGivenOnes[onesIn(b.words[s:s+b.sub])]
		}
		sum += 1 - none
	}
	return sum / float64(b.groups)
}

func (b *blocked) hashes() int         { return b.k }
func (b *blocked) bitsPerSlot() uint64 { return b.groups * uint64(b.sub*64) }
func (b *blocked) bytes() int          { return len(b.words) * 8 }

func onesIn(words []uint64) (ones int) {
	for w := range words {
		ones += bits.OnesCount64(atomic.LoadUint64(&words[w]))
	}
	return ones
}

// alignedWords returns n zero words starting on a cache line, so that each
// block is exactly one line. (Large allocations are page-aligned already;
// small ones, as in tests, may not be.)
func alignedWords(n int) []uint64 {
	w := make([]uint64, n+blockWords-1)
	off := (blockBytes - int(uintptr(unsafe.Pointer(&w[0])))%blockBytes) % blockBytes / 8
	return w[off : off+n : off+n]
}

// blockedSize returns the fewest blocks of blockBits bits that hold keys
// elements at a false-positive rate of at most p, and the number of bits
// per element k that needs them. It takes about a millisecond; the answers
// are kept, for the many small filters of tests.
func blockedSize(keys uint, p float64, blockBits int) (groups uint64, k int) {
	type question struct {
		keys uint
		p    float64
		bits int
	}
	type answer struct {
		groups uint64
		k      int
	}
	q := question{keys, p, blockBits}
	if a, ok := sizes.Load(q); ok {
		return a.(answer).groups, a.(answer).k
	}
	groups, k = computeBlockedSize(keys, p, blockBits)
	sizes.Store(q, answer{groups, k})
	return groups, k
}

var sizes sync.Map

func computeBlockedSize(keys uint, p float64, blockBits int) (groups uint64, k int) {
	n := float64(max(keys, 1))
	// An unblocked filter's best k, log2(1/p), and its size are a fine
	// start: a blocked filter needs a little more memory, at a k close by.
	kc := int(math.Ceil(-math.Log2(p)))
	start := uint64(math.Ceil(-n * math.Log(p) / (math.Ln2 * math.Ln2) / float64(blockBits)))
	groups = math.MaxUint64
	for kk := max(1, kc-4); kk <= kc+1; kk++ {
		model := newFPModel(kk, blockBits)
		fits := func(g uint64) bool { return model.rate(n/float64(g)) <= p }
		// The fewest groups that fit lie in [lo, hi]: double, then bisect.
		lo, hi := uint64(1), max(start, 1)
		for !fits(hi) {
			if hi > uint64(n) { // more than a block per key: not this k
				hi = 0
				break
			}
			lo, hi = hi+1, hi*2
		}
		if hi == 0 {
			continue
		}
		for lo < hi {
			if mid := lo + (hi-lo)/2; fits(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if hi < groups {
			groups, k = hi, kk
		}
	}
	if groups == math.MaxUint64 { // a block per key: as good as it gets
		groups, k = uint64(n), kc
	}
	return groups, k
}

// fpModel is the false-positive rate of a blocked filter with k bits per
// element in blocks of b bits, the bits drawn independently. The number of
// elements in a block is Poisson(lambda), lambda the mean load; and a block
// holding j elements has had j*k bits drawn, leaving c of its b bits set
// with the classic occupancy distribution, so that a new element's k bits
// are all set with probability (c/b)^k. Averaging (c/b)^k over c, rather
// than raising the mean fill to the k-th power, matters in small blocks.
type fpModel struct {
	k, b   int
	given  []float64 // given[j]: the chance for a block holding j elements
	occ    []float64 // occ[c]: the chance that c bits are set after len(given)-1 elements
	powers []float64 // powers[c] = (c/b)^k
}

func newFPModel(k, b int) *fpModel {
	m := &fpModel{k: k, b: b, given: []float64{0}, occ: make([]float64, b+1), powers: make([]float64, b+1)}
	m.occ[0] = 1
	for c := range m.powers {
		m.powers[c] = math.Pow(float64(c)/float64(b), float64(k))
	}
	return m
}

// rate is the false-positive rate at a mean load of lambda elements per
// block: the Poisson terms summed outward from the mode until they vanish.
func (m *fpModel) rate(lambda float64) float64 {
	if lambda <= 0 {
		return 0
	}
	mode := math.Floor(lambda)
	lg, _ := math.Lgamma(mode + 1)
	p0 := math.Exp(-lambda + mode*math.Log(lambda) - lg)
	sum := p0 * m.at(int(mode))
	for j, pj := mode, p0; j > 0; j-- {
		if pj *= j / lambda; pj < 1e-20 {
			break
		}
		sum += pj * m.at(int(j)-1)
	}
	for j, pj := mode+1, p0; ; j++ {
		if pj *= lambda / j; pj < 1e-20 {
			break
		}
		sum += pj * m.at(int(j))
	}
	return sum
}

// at is the chance for a block holding j elements, extending the table by
// drawing k more bits per element.
func (m *fpModel) at(j int) float64 {
	b := float64(m.b)
	for len(m.given) <= j {
		for range m.k { // draw one bit: it lands on a set one with probability c/b
			for c := m.b; c > 0; c-- {
				m.occ[c] = m.occ[c]*float64(c)/b + m.occ[c-1]*(b-float64(c-1))/b
			}
			m.occ[0] = 0
		}
		var e float64
		for c, pc := range m.occ {
			e += pc * m.powers[c]
		}
		m.given = append(m.given, e)
	}
	return m.given[j]
}
