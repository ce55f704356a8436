// Package ids makes the identifiers the service gives the rows it creates:
// the idempotency key row's UUID and the public, prefixed ids (pay_, re_,
// evt_, we_). It owns one property, that a new id sorts after the ids made
// before it (to the millisecond), and must never make an id that can
// repeat.
//
// Why time-ordered (issue 29, docs/failure-scenarios.md "A young
// database"): an id is the key of a primary-key b-tree, and often of a
// second index that points at the row (payments.idempotency_key_id). A
// random id lands on a random leaf page of each, so every insert dirties a
// page nobody else touched since the last checkpoint, and PostgreSQL writes
// that whole 8 KiB page to the WAL (a full-page image). An id that grows
// with time goes to the right-hand edge of each index, the page the
// previous insert dirtied.
//
// That edge is a page every request then reads and writes, and
// SERIALIZABLE's b-tree predicate locks are page-level: time-ordered ids are
// safe only because no request's later transaction writes an index entry
// of the key or payment tables (their moves are HOT updates: migrations
// 000024 and 000026), so a transaction that reads that page never also
// writes one that others read, and is never the pivot of a dangerous
// structure. With the updates not HOT, the same ids made B retry 2.7 times
// per request (measured: docs/failure-scenarios.md).
//
// What the order is not: a sequence. Ids made in the same millisecond by
// different processes interleave, and a clock that steps back makes ids
// that sort earlier; nothing may depend on their order for correctness,
// only for where they land. Uniqueness comes from the random part (74 bits
// in a UUID, 48 in a prefixed id, per millisecond), and the unique indexes
// stay the authority, as they were with random ids.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/google/uuid"
)

// NewUUID returns a version 7 UUID (RFC 9562 section 5.7): 48 bits of Unix
// milliseconds, then random bits; within one process, ids of the same
// millisecond still increase (google/uuid's sequence in rand_a).
func NewUUID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}

// New returns prefix, "_" and 24 hex characters: the first 12 are the Unix
// time in milliseconds (48 bits, big-endian, so the hex sorts as the time
// does until the year 10889), the last 12 are random. The length is the one
// the ids had when they were wholly random (the refunds table checks it).
//
// 48 random bits a millisecond: two ids collide only if they are made in the
// same millisecond and draw the same 48 bits, about once in 2^47 pairs of
// ids made in one millisecond; the primary key refuses the second insert, as
// it would have refused a repeat of a wholly random id.
func New(prefix string) string {
	return newAt(prefix, time.Now())
}

func newAt(prefix string, now time.Time) string {
	var b [12]byte
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(now.UnixMilli()))
	copy(b[:6], ms[2:])
	_, _ = rand.Read(b[6:]) // never fails (crypto/rand documents it)
	return prefix + "_" + hex.EncodeToString(b[:])
}
