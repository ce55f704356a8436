package recovery

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payments/internal/db/dbsqlc"
)

// Reaper deletes finished keys past their TTL, in small batches so no
// delete holds many locks for long. It never deletes an unfinished key.
// The work a key produced stays: its rows let go of the key in the
// statement that deletes it (ReapExpiredKeys: no foreign key does it, see
// migration 000023), and the key's child key generations go with it.
type Reaper struct {
	engine    *Engine
	batchSize int
	reaped    prometheus.Counter
}

// NewReaper returns a Reaper deleting batchSize keys per statement (default 500).
func NewReaper(engine *Engine, batchSize int, reg prometheus.Registerer) *Reaper {
	if batchSize <= 0 {
		batchSize = 500
	}
	r := &Reaper{engine: engine, batchSize: batchSize, reaped: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "payments_reaper_keys_deleted_total",
		Help: "Finished idempotency keys deleted after their TTL.",
	})}
	if reg != nil {
		reg.MustRegister(r.reaped)
	}
	return r
}

// RunOnce deletes every expired finished key, batch by batch, and says how many.
func (r *Reaper) RunOnce(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := queries.ReapExpiredKeys(ctx, r.engine.cfg.Pool, dbsqlc.ReapExpiredKeysParams{
			Now: r.engine.queryNow(), TtlSeconds: r.engine.cfg.KeyTTL.Seconds(), BatchSize: int32(r.batchSize),
		})
		total += n
		r.reaped.Add(float64(n))
		if err != nil || n < int64(r.batchSize) {
			return total, err
		}
	}
}
