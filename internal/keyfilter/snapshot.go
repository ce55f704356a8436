package keyfilter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"
	"time"
)

// A snapshot is the filter's bits, written now and then and read at
// start-up, so that a new process need not read every live key again: it
// loads the snapshot and then adds only the keys made since the time the
// snapshot covers (see Snapshot and LoadSnapshot). The format, all
// little-endian:
//
//	"PKFS", version (uint32, 1)
//	slices, words per slice's block, k (uint32 each); groups (uint64)
//	slice period (int64 ns), hash seed (uint64), newest slice (int64)
//	covers (int64 ns since 1970)
//	the words (uint64 each: groups × slices × 8)
//	CRC-32C of everything before it (uint32)
//
// Only the blocked layout has snapshots.

// ErrSnapshotUnusable is the error of LoadSnapshot for a snapshot it will
// not use: corrupt, stale, made for another size of filter, or offered to a
// filter that took keys already. The caller rebuilds instead.
var ErrSnapshotUnusable = errors.New("keyfilter: snapshot unusable")

const (
	snapshotMagic   = "PKFS"
	snapshotVersion = 1
	snapshotHeader  = 4 + 4 + 3*4 + 8 + 4*8
	// snapshotFuture is how far in the future of the filter's clock a
	// snapshot's time may lie: the time it covers is the database's clock,
	// and the two clocks differ by a little.
	snapshotFuture = time.Minute
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot returns the filter's bits and the time they cover: the caller
// vouches that every key live from before covers (by the clock of the
// rows' LiveFrom) was added. Adds may run meanwhile: a key added while the
// bits are copied may be in them only in part (its line's words are copied
// one at a time), so the caller must vouch only for keys added before the
// copy began, and read the others again after a load (those live from
// after covers, less its margin). A nil, disabled or bloomv3 filter has
// none: nil.
func (f *Filter) Snapshot(covers time.Time) []byte {
	if f == nil {
		return nil
	}
	b, ok := f.slots.(*blocked)
	if !ok {
		return nil
	}
	f.mu.Lock() // no rotation clears a slot while the words are copied
	defer f.mu.Unlock()
	out := make([]byte, 0, snapshotHeader+8*len(b.words)+4)
	out = append(out, snapshotMagic...)
	out = binary.LittleEndian.AppendUint32(out, snapshotVersion)
	out = binary.LittleEndian.AppendUint32(out, uint32(b.n))
	out = binary.LittleEndian.AppendUint32(out, uint32(b.sub))
	out = binary.LittleEndian.AppendUint32(out, uint32(b.k))
	out = binary.LittleEndian.AppendUint64(out, b.groups)
	out = binary.LittleEndian.AppendUint64(out, uint64(f.period))
	out = binary.LittleEndian.AppendUint64(out, b.seed)
	out = binary.LittleEndian.AppendUint64(out, uint64(f.gen.Load()))
	out = binary.LittleEndian.AppendUint64(out, uint64(covers.UnixNano()))
	for i := range b.words {
		out = binary.LittleEndian.AppendUint64(out, atomic.LoadUint64(&b.words[i]))
	}
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// LoadSnapshot takes the bits of a snapshot made by a filter of the same
// configuration, and returns the time it covers. It refuses
// (ErrSnapshotUnusable) a snapshot that is corrupt, made for another
// configuration, from more than a minute in the future, or older than
// maxAge or the TTL by the filter's clock, and refuses to load into a filter
// that took a key or is ready. The filter stays cold: the caller then
// Rebuilds it with the keys live from after the time covered (less a
// margin for the rows still being committed when it was taken), which
// makes it ready. Call it before the filter takes keys.
func (f *Filter) LoadSnapshot(data []byte, maxAge time.Duration) (covers time.Time, err error) {
	if f == nil {
		return time.Time{}, fmt.Errorf("%w: no filter", ErrSnapshotUnusable)
	}
	b, ok := f.slots.(*blocked)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: the %s layout has no snapshots", ErrSnapshotUnusable, f.cfg.Layout)
	}
	bad := func(format string, args ...any) (time.Time, error) {
		return time.Time{}, fmt.Errorf("%w: %s", ErrSnapshotUnusable, fmt.Sprintf(format, args...))
	}
	if len(data) < snapshotHeader+4 {
		return bad("%d bytes, too short", len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("checksum mismatch")
	}
	le := binary.LittleEndian
	if string(body[:4]) != snapshotMagic || le.Uint32(body[4:]) != snapshotVersion {
		return bad("not a version %d snapshot", snapshotVersion)
	}
	slices, sub, k := int(le.Uint32(body[8:])), int(le.Uint32(body[12:])), int(le.Uint32(body[16:]))
	groups, period := le.Uint64(body[20:]), time.Duration(le.Uint64(body[28:]))
	seed, gen := le.Uint64(body[36:]), int64(le.Uint64(body[44:]))
	covers = time.Unix(0, int64(le.Uint64(body[52:])))
	if slices != b.n || sub != b.sub || k != b.k || groups != b.groups || period != f.period {
		return bad("made for %d slices of %d blocks of %d words, k=%d, %s each; this filter has %d of %d of %d, k=%d, %s",
			slices, groups, sub, k, period, b.n, b.groups, b.sub, b.k, f.period)
	}
	if len(body)-snapshotHeader != 8*len(b.words) {
		return bad("%d bytes of bits, want %d", len(body)-snapshotHeader, 8*len(b.words))
	}
	now := time.Unix(0, f.now())
	switch age := now.Sub(covers); {
	case age < -snapshotFuture:
		return bad("covers %s, %s in the future of this clock", covers.UTC().Format(time.RFC3339), -age)
	case age > min(maxAge, f.cfg.TTL):
		return bad("covers %s, %s ago: older than %s", covers.UTC().Format(time.RFC3339), age.Round(time.Second), min(maxAge, f.cfg.TTL))
	}
	if err := f.load(b, seed, gen, body[snapshotHeader:]); err != nil {
		return bad("%v", err)
	}
	// The snapshot's slices are in their slots (slice g in slot g mod
	// Slices): from its newest, rotating to the clock's clears those that
	// ended since, as if the filter had run all along.
	f.rotate()
	return covers, nil
}

func (f *Filter) load(b *blocked, seed uint64, gen int64, words []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready.Load() {
		return errors.New("the filter is ready already")
	}
	for i := range b.words {
		if atomic.LoadUint64(&b.words[i]) != 0 {
			return errors.New("the filter took keys already, hashed with its own seed")
		}
	}
	b.seed = seed
	for i := range b.words {
		atomic.StoreUint64(&b.words[i], binary.LittleEndian.Uint64(words[8*i:]))
	}
	// A newest slice behind the clock's is moved up by the rotation; one
	// ahead of it (the database's clock was ahead) is kept, as when a clock
	// goes back.
	f.publish(gen)
	return nil
}

// SetCovers records that every key live from before t (by the clock of the
// rows' LiveFrom) is in the bits: the caller read them all, in a Rebuild
// that began after t. It only moves forward.
func (f *Filter) SetCovers(t time.Time) {
	if f == nil {
		return
	}
	for ns := t.UnixNano(); ; {
		old := f.covers.Load()
		if old >= ns || f.covers.CompareAndSwap(old, ns) {
			return
		}
	}
}

// Covers is the time SetCovers last recorded, or the zero time.
func (f *Filter) Covers() time.Time {
	if f == nil || f.covers.Load() == 0 {
		return time.Time{}
	}
	return time.Unix(0, f.covers.Load())
}
