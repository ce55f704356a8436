package payments

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers the payments' metrics read from the database
// when Prometheus scrapes: every process that serves /metrics reports them
// alike, whichever process found what they count.
func RegisterMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) {
	reg.MustRegister(&duplicatesCollector{pool: pool})
}

var duplicatesDesc = prometheus.NewDesc("payments_stripe_duplicates_total",
	"Objects Stripe made twice for one request of the service (docs/API.md, \"Stripe's evidence is never dropped\"): "+
		"object=\"refund\", second refunds, recorded as refunds of origin duplicate; object=\"payment_intent\", "+
		"second PaymentIntents that charged the customer, each refunded by the service.",
	[]string{"object"}, nil)

type duplicatesCollector struct{ pool *pgxpool.Pool }

func (c *duplicatesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- duplicatesDesc }

// Collect counts what the database committed, so a transaction run again
// never counts twice. It reports nothing when the query fails: a gap, not a
// made-up zero.
func (c *duplicatesCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := queries.CountStripeDuplicates(ctx, c.pool)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(duplicatesDesc, prometheus.CounterValue, float64(n.Refunds), "refund")
	ch <- prometheus.MustNewConstMetric(duplicatesDesc, prometheus.CounterValue, float64(n.PaymentIntents), "payment_intent")
}
