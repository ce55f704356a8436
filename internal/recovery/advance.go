package recovery

import (
	"context"

	"github.com/example/payments/internal/db"
)

// A request needs as many commits as it has external calls, plus one: one
// before the first call (the claim), one after each. Recovery points with no
// external call between them share a commit: commitTx runs, in the same
// transaction, every local phase that follows, up to the next external call
// or the final response. Each recovery point keeps its meaning (it still
// names what is committed, and its failpoints still fire at that commit),
// but the database sees two transactions for a create-payment request
// instead of four.

// commitTx records out, the outcome of the phase just run in tx, then runs
// the local phases that follow it, and moves the key, fenced, to where they
// got. It fires before_commit for every recovery point reached, in order,
// and returns them with the final outcome.
func (e *Engine) commitTx(ctx context.Context, tx *db.Tx, flow *Flow, k *Key, out Outcome) ([]RecoveryPoint, Outcome, error) {
	reached := []RecoveryPoint{out.next}
	for out.response == nil {
		next, ok := flow.Phases[out.next]
		if !ok || next.call != nil {
			break
		}
		var err error
		if out, err = next.commit(ctx, tx, k, nil); err != nil {
			return nil, out, err
		}
		reached = append(reached, out.next)
	}
	if err := e.moveKey(ctx, tx, k, out); err != nil {
		return nil, out, err
	}
	for _, p := range reached {
		if err := e.cfg.Failpoints.Fire("before_commit:" + string(p)); err != nil {
			return nil, out, err
		}
	}
	return reached, out, nil
}

// settle updates k after the commit of out, and fires after_commit for
// every recovery point the commit reached.
func (e *Engine) settle(k *Key, reached []RecoveryPoint, out Outcome) error {
	if len(reached) == 0 {
		return nil
	}
	k.RecoveryPoint = out.next
	if out.response != nil {
		k.ResponseCode, k.responseBody, k.Locked = out.response.Status, out.response.Body, false
		if k.lockToken > 1 {
			// Resumed, maybe long after its claim put it in the filter's
			// slice of that time: it lives a TTL from now, so it goes in
			// the current slice too. (A miss would only cost a false "new"
			// that the unique index catches.)
			e.cfg.KeyFilter.Add(k.UserID, k.Key)
		}
	}
	for _, p := range reached {
		if err := e.cfg.Failpoints.Fire("after_commit:" + string(p)); err != nil {
			return err
		}
	}
	return nil
}

// isLocal tells whether the phase at p commits without calling out first.
func (f *Flow) isLocal(p RecoveryPoint) (Phase, bool) {
	phase, ok := f.Phases[p]
	return phase, ok && phase.call == nil
}
