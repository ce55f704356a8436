package recovery

import (
	"context"
	"slices"
	"time"

	"github.com/example/payments/internal/db/dbsqlc"
)

// Call windows: when the remote side may have executed a phase's call.
//
// A phase's reconcile (WithReconcile) asks the remote side whether an
// earlier call of the phase made its object. A remote side may only be able
// to answer with a list of what it made in a span of time (Stripe lists
// PaymentIntents by their created time, and cannot filter the list by
// metadata), and a list from the key's creation to now reads everybody's
// objects of that whole time: hours of them for a key retried for hours.
// The engine knows better, and says so to the reconcile: a call of the
// phase can only have been made by an attempt that held the key at the
// phase's recovery point, after the commit that made the call possible.
// Before a reconcile runs, the key carries its call windows
// (Key.CallWindows), one per attempt at the phase's recovery point (the
// overlapping ones merged), oldest first. Each:
//
//   - opens at the later of the attempt's claim and the commit that moved
//     the key to the recovery point (a key moved on starts afresh: a call
//     of the phase before could not have been made);
//   - closes at the attempt's recorded end: its unlock, which records its
//     failure; else, for an attempt that died holding the key, the end of
//     the lock it last wrote (its last heartbeat or move plus its lock's
//     lifetime: it died before its next heartbeat, due a third of that
//     lifetime later, or its heartbeat would have renewed it); for the
//     attempt running the reconcile, now;
//   - and then stays open Config.SpentKeyGrace longer (none when the grace
//     is off; the grace of the engine that records the window). A remote
//     side may go on executing a request after it answered it (Stripe's
//     stored 500, childkeys.go), and the engine already bets that such
//     work ends within the grace: a reconcile that looks past the attempt's
//     end by as much finds every object the engine trusts "nothing found"
//     to rule out. A request the remote side executes later still is not
//     the reconcile's to find: a service that reads the remote side's own
//     record of what it did finds it there (the payments service's
//     reconciler records such a PaymentIntent as a duplicate charge, and
//     refunds it). Windows that then overlap are one, in the row too: a
//     key retried every few seconds keeps one window, not one per retry.
//
// The windows are on the engine's one clock (Config.Now, else the
// database's): a reconcile that compares them with the remote side's own
// times widens them by what it knows of the two clocks' difference.
//
// What it costs: nothing on the hot path. The statements that already write
// the key row stamp it: its insert and every move (the recovery point's
// first window opens), every claim of an existing key (the previous
// attempt's window joins the earlier ones), every unlock (the attempt's
// end); see migration 000046. A request that succeeds at its first attempt
// writes one more column in its insert and in each move, and clears them
// in its finish: no statement or round trip more
// (TestCreate_roundTripsOfANewPaymentAndOfItsReplay counts them). Each
// further attempt adds at most one range to the row (none for a retry
// within the grace of the last attempt's end).
// Only a reconcile, which runs where the engine is unsure (a stored
// failure, a key past the remote side's window), reads them: one query by
// the key's primary key.

// CallWindow is a span of time in which the remote side may have executed
// an external call of one of the key's attempts, on the engine's clock:
// From and To included.
type CallWindow struct {
	From, To time.Time
}

// CallWindows are the key's call windows at its recovery point (see
// above), oldest first, none overlapping: what a reconcile needs to narrow
// a list of the remote side's objects to the minutes of the key's own
// attempts. They are there only while a reconcile runs; nil elsewhere.
func (k *Key) CallWindows() []CallWindow { return k.callWindows }

// findEarlierCall runs the phase's reconcile with the key's call windows
// loaded; ErrLockLost if the key is no longer this attempt's.
func (e *Engine) findEarlierCall(ctx context.Context, k *Key, phase Phase) (any, bool, error) {
	rows, err := queries.ListCallWindows(ctx, e.cfg.Pool, dbsqlc.ListCallWindowsParams{
		ID: k.ID, LockToken: k.lockToken, Now: e.queryNow(), CallWindowTailSeconds: e.callWindowTail(),
	})
	if err != nil {
		return nil, false, err
	}
	if len(rows) == 0 {
		return nil, false, ErrLockLost // another attempt took the key over
	}
	windows := make([]CallWindow, 0, len(rows))
	for _, r := range rows {
		windows = append(windows, CallWindow{From: r.OpenedAt, To: r.EndedAt})
	}
	k.callWindows = windows
	defer func() { k.callWindows = nil }()
	return phase.reconcile(ctx, k)
}

// callWindowTail is how long, in seconds, a call window stays open after
// its attempt ended: SpentKeyGrace (0 when it is off).
func (e *Engine) callWindowTail() float64 { return e.cfg.SpentKeyGrace.Seconds() }

// MergeCallWindows returns windows sorted by their start, with the windows
// that overlap or touch made one: a reconcile that widens a key's windows
// (by a clock's skew) merges them again with it, so that it asks for no
// stretch of time twice.
func MergeCallWindows(windows []CallWindow) []CallWindow {
	sorted := slices.Clone(windows)
	slices.SortFunc(sorted, func(a, b CallWindow) int { return a.From.Compare(b.From) })
	var merged []CallWindow
	for _, w := range sorted {
		if n := len(merged); n > 0 && !w.From.After(merged[n-1].To) {
			if w.To.After(merged[n-1].To) {
				merged[n-1].To = w.To
			}
			continue
		}
		merged = append(merged, w)
	}
	return merged
}
