package main

// The disputes of the reconciler's scenario (reconcile.go): Stripe opens
// them on its own, and the bench decides which of their webhooks were
// delivered, closes most of them days later, and measures how long those
// whose every webhook was lost take to reach the API.

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/stripesim"
)

// Disputes close, won or lost half each, uniformly 1 to 20 days after they
// open (Stripe's docs, docs.stripe.com/disputes/how-disputes-work: the
// bank decides "within 60-75 days" after evidence is submitted; a month's
// run closes only some, which is the point: open and closed ones both, at
// the end). A share stays open.
const (
	disputeCloseShare = 0.8
	disputeCloseMin   = 24 * time.Hour
	disputeCloseMax   = 20 * 24 * time.Hour
)

// disputeBench is the scenario's disputes and what it measured of them.
type disputeBench struct {
	drop  float64
	apply payments.ApplyEvent

	payments map[string]string // the disputed payments' PaymentIntent: payment id
	seen     map[string]bool   // dispute events already decided (EventsSince's windows touch)
	lostMove map[string]bool   // each move (dispute id and status): were its webhooks lost
	pending  map[string]disputeChange
	closes   []plannedClose // by at

	opened, closed, won   int
	nEvents, lostWebhooks int
	latencies             []time.Duration
}

// disputeChange is a dispute's move (opened, or closed) whose every
// webhook was lost: the reconciler has to bring it.
type disputeChange struct {
	payment, dispute, status string
	made                     time.Time
}

type plannedClose struct {
	at         time.Time
	id, status string
}

func newDisputeBench(o reconcileOptions, apply payments.ApplyEvent) *disputeBench {
	return &disputeBench{drop: o.drop, apply: apply, payments: map[string]string{}, seen: map[string]bool{},
		lostMove: map[string]bool{}, pending: map[string]disputeChange{}}
}

// close closes the disputes due by now, as the bank's decision would.
func (d *disputeBench) close(sim *stripesim.Simulator, now time.Time) {
	n := 0
	for _, c := range d.closes {
		if c.at.After(now) {
			break
		}
		n++
		if err := sim.CloseDispute(c.id, c.status); err == nil {
			d.closed++
			if c.status == "won" {
				d.won++
			}
		}
	}
	d.closes = d.closes[n:]
}

// events decides the webhooks of the dispute events made from since on: a
// move's (charge.dispute.created and funds_withdrawn at once, or closed
// and funds_reinstated) are lost together at the drop rate, as an outage
// of the endpoint loses the events of one moment, or delivered, that is
// applied through the webhook's own code. Lost one by one, both events of
// a move would be lost for about one move in 10,000 at 1 %: the reconciler
// would have nothing to bring. A dispute that opened gets its close
// planned.
func (d *disputeBench) events(ctx context.Context, sim *stripesim.Simulator, rng *rand.Rand, since, now time.Time) error {
	for _, ev := range sim.EventsSince(since, "charge.dispute.") {
		if d.seen[ev.ID] {
			continue
		}
		d.seen[ev.ID] = true
		d.nEvents++
		var e struct {
			Data struct {
				Object struct {
					ID            string `json:"id"`
					Status        string `json:"status"`
					PaymentIntent string `json:"payment_intent"`
				} `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(ev.Payload, &e); err != nil {
			return err
		}
		dp := e.Data.Object
		if ev.Type == "charge.dispute.created" {
			d.opened++
			if rng.Float64() < disputeCloseShare {
				status := "lost"
				if rng.IntN(2) == 0 {
					status = "won"
				}
				at := now.Add(disputeCloseMin + time.Duration(rng.Int64N(int64(disputeCloseMax-disputeCloseMin))))
				i, _ := slices.BinarySearchFunc(d.closes, at, func(c plannedClose, t time.Time) int { return c.at.Compare(t) })
				d.closes = slices.Insert(d.closes, i, plannedClose{at: at, id: dp.ID, status: status})
			}
		}
		change := dp.ID + " " + dp.Status
		lost, decided := d.lostMove[change]
		if !decided {
			lost = rng.Float64() < d.drop
			d.lostMove[change] = lost
		}
		if lost {
			d.lostWebhooks++
			d.pending[change] = disputeChange{payment: d.payments[dp.PaymentIntent], dispute: dp.ID, status: dp.Status, made: ev.Made}
			continue
		}
		if _, err := d.apply(ctx, ev.Payload); err != nil {
			return err
		}
	}
	return nil
}

// shown takes the changes the API now shows out of pending, with how long
// after Stripe made them: the payment holds that dispute at that status,
// or a later one (closed after it opened). The rows it reads are the
// benchmark's: counted into instrument, as shown's.
func (d *disputeBench) shown(ctx context.Context, pool *pgxpool.Pool, now time.Time, instrument *int64) error {
	var ids []string
	for _, c := range d.pending {
		ids = append(ids, c.payment)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, "SELECT id, dispute->>'id', dispute->>'status' FROM payments WHERE id = ANY($1) AND dispute IS NOT NULL", ids)
	if err != nil {
		return err
	}
	held := map[string][2]string{}
	for rows.Next() {
		var id, dpID, status string
		if err := rows.Scan(&id, &dpID, &status); err != nil {
			return err
		}
		held[id] = [2]string{dpID, status}
	}
	if rows.Err() != nil {
		return rows.Err()
	}
	var read int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE relname = 'payments'`).Scan(&read); err != nil {
		return err
	}
	*instrument += read
	for key, c := range d.pending {
		h := held[c.payment]
		if h[0] == c.dispute && (h[1] == c.status || (c.status == "needs_response" && (h[1] == "won" || h[1] == "lost"))) {
			d.latencies = append(d.latencies, now.Sub(c.made))
			delete(d.pending, key)
		}
	}
	return tx.Commit(ctx)
}

// disputeDifferences counts the disputes the API does not hold as Stripe
// does (another dispute, another status, none), and the payments holding a
// dispute Stripe does not have.
func disputeDifferences(ctx context.Context, pool *pgxpool.Pool, sim *stripesim.Simulator) (int, error) {
	raw, err := sim.Objects("dispute")
	if err != nil {
		return 0, err
	}
	stripe := map[string][2]string{} // PaymentIntent: dispute id, status
	for _, r := range raw {
		var dp struct {
			ID            string `json:"id"`
			Status        string `json:"status"`
			PaymentIntent string `json:"payment_intent"`
		}
		if err := json.Unmarshal(r, &dp); err != nil {
			return 0, err
		}
		stripe[dp.PaymentIntent] = [2]string{dp.ID, dp.Status}
	}
	pis := make([]string, 0, len(stripe))
	for pi := range stripe {
		pis = append(pis, pi)
	}
	rows, err := pool.Query(ctx, `SELECT stripe_payment_intent, coalesce(dispute->>'id', ''), coalesce(dispute->>'status', '')
		FROM payments WHERE dispute IS NOT NULL OR stripe_payment_intent = ANY($1)`, pis)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	differ, matched := 0, 0
	for rows.Next() {
		var pi, id, status string
		if err := rows.Scan(&pi, &id, &status); err != nil {
			return 0, err
		}
		want, ok := stripe[pi]
		if ok {
			matched++
		}
		if !ok || want != [2]string{id, status} {
			differ++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return differ + len(stripe) - matched, nil
}

// duplicateDifferences counts what the service recorded as Stripe's
// duplicates (a second refund of one of ours, a second PaymentIntent that
// charged the customer): this scenario makes none at Stripe, so each one
// differs from Stripe's record.
func duplicateDifferences(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM refunds WHERE origin = 'duplicate')
		+ (SELECT count(*) FROM payments WHERE duplicate_charges IS NOT NULL)`).Scan(&n)
	return n, err
}

// peakRSS is the process's peak resident set (VmHWM), 0 where /proc has
// none.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// dirSize is the bytes of the files under dir (PostgreSQL's data
// directory: tables, indexes, WAL).
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err != nil {
			return nil // a file PostgreSQL removed meanwhile
		}
		if !e.IsDir() {
			if info, err := e.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total, err
}
