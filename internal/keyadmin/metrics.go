package keyadmin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics adds to reg the two gauges an operator alerts on, read
// from the database on each scrape (one query, through the table of
// unfinished keys, migrations 000026 and 000029):
//
//   - payments_idempotency_keys_needing_attention: keys the completer gave
//     up on; each needs a person (`payments keys list --state needs_attention`).
//   - payments_idempotency_keys_oldest_unfinished_age_seconds: how long the
//     oldest request the completer should still finish has waited for its
//     final answer: the completer's lag.
//
// Every process that registers them reports the same values (they read the
// one database); alerting rules take the max.
func RegisterMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) {
	reg.MustRegister(&keyCollector{pool: pool})
}

var (
	needingAttentionDesc = prometheus.NewDesc("payments_idempotency_keys_needing_attention",
		"Idempotency keys given up on (past Stripe's idempotency window with nothing found at Stripe, or failed with an error no retry can cure): each needs a person.", nil, nil)
	oldestUnfinishedDesc = prometheus.NewDesc("payments_idempotency_keys_oldest_unfinished_age_seconds",
		"Age of the oldest request without its final answer, not counting keys needing attention: the completer's lag (0 when none).", nil, nil)
)

type keyCollector struct{ pool *pgxpool.Pool }

func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- needingAttentionDesc
	ch <- oldestUnfinishedDesc
}

// Collect reports nothing when the query fails: a missing sample, which
// Prometheus shows as a gap, rather than a made-up zero.
func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := queries.UnfinishedKeyStats(ctx, c.pool)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(needingAttentionDesc, prometheus.GaugeValue, float64(stats.NeedingAttention))
	ch <- prometheus.MustNewConstMetric(oldestUnfinishedDesc, prometheus.GaugeValue, stats.OldestUnfinishedAgeSeconds)
}
