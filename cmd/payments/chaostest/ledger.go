package chaostest

import (
	"slices"
	"sync"
	"time"
)

// Op is what a logical request does.
type Op string

// The operations clients make.
const (
	OpCreate  Op = "create"
	OpCapture Op = "capture"
	OpCancel  Op = "cancel"
	OpRefund  Op = "refund"
)

// Record is one logical request, as its client saw it: what was sent, what
// was expected, and every final answer it got, from its first execution to
// its deliberate replays.
type Record struct {
	Key    string
	UserID int64
	Op     Op
	Method string
	Path   string
	Body   []byte
	// Payment is the payment a capture, cancel or refund acts on.
	Payment string
	// Create's parameters, to compare the payment row with.
	Amount        int64
	Currency      string
	PaymentMethod string
	Capture       bool

	Expect Expect

	// Finals are the final answers of the senders of the request: one, or
	// two when the request was "double-clicked" onto both instances at once.
	Finals []Answer
	// Replays are the answers to the same request sent again after it was
	// final; Reuses the answers to the same key with another body.
	Replays []Answer
	Reuses  []Answer
	// Hostile are the answers to bodies sent with the key before the
	// request itself: the same request made ambiguous (a field twice, in
	// another case) or holding text no database stores (NUL, invalid
	// UTF-8). Each must be 400 validation_failed, storing nothing, so the
	// request that follows with the same key runs as if they never came.
	Hostile []Answer
	// Attempts counts every HTTP attempt of every sender.
	Attempts int
	// Slowest is the longest any attempt took to be answered; TimedOut
	// counts the attempts that got no answer within attemptTimeout.
	Slowest  time.Duration
	TimedOut int
	// GaveUp is set when a sender ran out of its retry budget.
	GaveUp bool
	// FreshGot409 is set when the very first attempt with the key, by its
	// only sender, was answered 409: no other request held the key (unless
	// the crasher stalled that attempt's instance past the lock timeout).
	FreshGot409 bool
	// CameBackLate is set when the client, answered 503, waited past the
	// key's TTL (since its claim) before it tried again: a late finish.
	CameBackLate bool
}

// Answer is one final HTTP answer.
type Answer struct {
	Status   int
	Body     []byte
	Replayed bool   // Idempotent-Replayed: true
	KeyEcho  string // the Idempotency-Key header of the response
	At       time.Time
}

// Expect is the answer a request should get: Want, or Alt when the request
// races another one of the same Race group, where exactly one gets Want.
type Expect struct {
	Want Outcome
	Alt  *Outcome
	Race string
}

// Outcome describes an answer: its status, the problem code of an error,
// the status of the payment or refund it carries, an amount (the payment's
// amount_captured or the refund's amount; 0: not checked), and the decline
// code of a 402.
type Outcome struct {
	Status       int
	Code         string
	ObjectStatus string
	Amount       int64
	DeclineCode  string
}

// Ledger is every client's records, safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	records []*Record
}

// Add registers a new logical request.
func (l *Ledger) Add(r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
}

// Update changes a record under the ledger's lock.
func (l *Ledger) Update(r *Record, change func(r *Record)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	change(r)
}

// Records returns a deep copy of every record, for the checker.
func (l *Ledger) Records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Record, 0, len(l.records))
	for _, r := range l.records {
		c := *r
		c.Finals = slices.Clone(r.Finals)
		c.Replays = slices.Clone(r.Replays)
		c.Reuses = slices.Clone(r.Reuses)
		out = append(out, c)
	}
	return out
}

// finished returns the records that got a final answer.
func (l *Ledger) finished() []*Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Record
	for _, r := range l.records {
		if len(r.Finals) > 0 {
			out = append(out, r)
		}
	}
	return out
}
