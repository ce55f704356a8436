package keyfilter

import (
	"math/bits"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"
)

// bloomV3 is the baseline layout: one bits-and-blooms/bloom/v3 filter per
// slot, sized by bloom.EstimateParameters, with bloom/v3's own hash and bit
// positions. Only the bit operations are done here, on the filters' words:
// bloom/v3's Add and Test are not safe for concurrent use, so adds set bits
// with atomic ORs and checks read them with atomic loads.
//
// A check hashes once (bloom.Locations) and reuses the positions in every
// slot, since all slots have the same size; it still reads up to k scattered
// cache lines per slot.
type bloomV3 struct {
	filters []*bloom.BloomFilter
	words   [][]uint64 // filters[i].BitSet().Words()
	m       uint64
	k       uint
}

func newBloomV3(n int, keys uint, p float64) *bloomV3 {
	m, k := bloom.EstimateParameters(keys, p)
	b := &bloomV3{}
	for range n {
		f := bloom.New(m, k)
		b.filters = append(b.filters, f)
		b.words = append(b.words, f.BitSet().Words())
	}
	b.m, b.k = uint64(b.filters[0].Cap()), b.filters[0].K() // New raises 0 to 1
	return b
}

// locations hashes the element once into the bit numbers every slot shares.
func (b *bloomV3) locations(userID int64, key string) []uint64 {
	var buf [elementBuf]byte
	locs := bloom.Locations(appendElement(buf[:0], userID, key), b.k)
	for i, l := range locs {
		locs[i] = l % b.m
	}
	return locs
}

func (b *bloomV3) test(userID int64, key string) (bool, uint64) {
	locs := b.locations(userID, key)
	return b.testAt(locs), locs[0]
}

func (b *bloomV3) add(slot int, userID int64, key string) {
	b.addAt(slot, b.locations(userID, key))
}

func (b *bloomV3) testAndAdd(slot int, userID int64, key string) (bool, uint64) {
	locs := b.locations(userID, key)
	maybe := b.testAt(locs)
	b.addAt(slot, locs)
	return maybe, locs[0]
}

func (b *bloomV3) testAt(locs []uint64) bool {
next:
	for _, w := range b.words {
		for _, l := range locs {
			if atomic.LoadUint64(&w[l/64])&(1<<(l%64)) == 0 {
				continue next
			}
		}
		return true
	}
	return false
}

// addAt reads all the words first, so that their cache misses overlap, and
// then sets the bits still missing.
func (b *bloomV3) addAt(slot int, locs []uint64) {
	w := b.words[slot]
	var missing uint64 // bit i: locs[i] is not set yet (New keeps k <= 64)
	for i, l := range locs {
		if atomic.LoadUint64(&w[l/64])&(1<<(l%64)) == 0 {
			missing |= 1 << i
		}
	}
	for i, l := range locs {
		if missing&(1<<i) != 0 {
			atomic.OrUint64(&w[l/64], 1<<(l%64))
		}
	}
}

func (b *bloomV3) clear(slot int) {
	w := b.words[slot]
	for i := range w {
		if atomic.LoadUint64(&w[i]) != 0 {
			atomic.StoreUint64(&w[i], 0)
		}
	}
}

func (b *bloomV3) fill(slot int) float64 {
	var ones int
	for i := range b.words[slot] {
		ones += bits.OnesCount64(atomic.LoadUint64(&b.words[slot][i]))
	}
	return float64(ones) / float64(b.m)
}

// falsePositiveRate is fill^k per slot (each of the k positions is set
// with the fill ratio's probability), combined over the slots.
func (b *bloomV3) falsePositiveRate() float64 {
	none := 1.0
	for slot := range b.words {
		p := 1.0
		fill := b.fill(slot)
		for range b.k {
			p *= fill
		}
		none *= 1 - p
	}
	return 1 - none
}

func (b *bloomV3) hashes() int         { return int(b.k) }
func (b *bloomV3) bitsPerSlot() uint64 { return b.m }
func (b *bloomV3) bytes() int          { return len(b.words) * len(b.words[0]) * 8 }
