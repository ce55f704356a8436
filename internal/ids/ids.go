// Package ids makes time-ordered ids: a prefix, then 12 hex digits of the
// Unix time in milliseconds (48 bits, big-endian, so that the ids of later
// milliseconds sort after those of earlier ones, as text and as bytes),
// then 12 random hex digits (48 bits).
//
// Why: a random id sends each insert to a random leaf of its table's
// primary key (and of every index that leads with the id), so at scale each
// insert reads a page that is not in the cache, and the first change of
// each page after a checkpoint writes the whole page to the WAL. A
// time-ordered id sends every insert to the right-most leaf, which is hot.
// Event ids use it (issue 29: events and webhook_deliveries, whose primary
// key leads with the event's id).
//
// Why not every id: under SERIALIZABLE, PostgreSQL's predicate locks on a
// b-tree are page-level, so when the transactions of concurrent requests all
// read and insert into the same right-most leaf they fail to serialize.
// Time-ordered key and payment ids were measured to make new payments retry
// 3.6 times per request (docs/failure-scenarios.md "A young database"). Use
// this package only for ids whose rows no SERIALIZABLE transaction inserts
// at the right-most leaf: events are written by the drain at READ
// COMMITTED, which SSI does not track.
//
// 48 random bits a millisecond make two ids of the same millisecond equal
// with a probability of about n²/2^49 for n ids in it: about 2·10^-9 at a
// million ids a second.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// TimeOrdered returns prefix followed by a time-ordered id of 24 hex digits
// (the package comment says how it is made).
func TimeOrdered(prefix string) string {
	return timeOrdered(prefix, time.Now())
}

func timeOrdered(prefix string, now time.Time) string {
	var b [12]byte
	// The milliseconds' low 48 bits, big-endian: the top two bytes of the
	// 64-bit big-endian form are zero until the year 10889.
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // never fails (crypto/rand documents it)
	return prefix + hex.EncodeToString(b[:])
}
