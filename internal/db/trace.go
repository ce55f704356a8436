package db

import (
	"context"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"

	"github.com/example/payments/internal/telemetry"
)

// queryTracer is what sees the pool's statements: counter (the benchmark
// counts them), and, when tracing is on, otelpgx, which makes each
// statement a span of the trace in its context (a statement with no traced
// parent, background polling say, makes none). With tracing off no tracer
// is added at all, so a statement costs what it did before tracing.
//
// A pipelined transaction (Tx) sends its queued statements with the next
// round trip, so in a trace they appear under the span of whoever sent that
// round trip: a batch span ("batch start") holding one span per statement.
func queryTracer(counter pgx.QueryTracer) pgx.QueryTracer {
	if !telemetry.Enabled() {
		return counter
	}
	spans := otelpgx.NewTracer(
		otelpgx.WithSpanNameCtxFunc(statementSpanName),
		// A span per connection taken from the pool would double every
		// transaction's spans; the wait shows as the gap before its first statement.
		otelpgx.WithDisableAcquireTracer(),
	)
	if counter == nil {
		return spans
	}
	return multitracer.New(counter, spans)
}

// statementSpanName names a statement's span by its sqlc query name (every
// query in queries/ starts "-- name: InsertPayment :one"), which says what
// it does and is the name to grep for; else by its first word (BEGIN,
// COMMIT, SAVEPOINT).
func statementSpanName(ctx context.Context, sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		if name, _, ok := strings.Cut(rest, " "); ok {
			return name
		}
	}
	return otelpgx.SQLOperationName(ctx, sql)
}
