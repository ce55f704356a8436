package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db/dbsqlc"
)

var probeQueries = dbsqlc.New()

// ProbeTimeout is how long ProbeCommit waits for its commit: a readiness
// check must answer before its caller gives up (a Kubernetes probe's
// timeoutSeconds defaults to 1 and is usually raised to a few; haproxy,
// without `timeout check`, bounds a whole check by its `inter`, 2 s by
// default), and a commit on a healthy primary with a synchronous standby
// takes milliseconds. docs/API.md section 11 asks for 503 within 5 s of the
// process becoming unable to commit: a probe made at any moment answers
// within 2 s.
const ProbeTimeout = 2 * time.Second

// ProbeCommit proves that a commit is possible on pool now: the server is
// not a standby (pg_is_in_recovery() is false), and a write (migration
// 000033's one row) commits within timeout (ProbeTimeout when 0). The
// write's COMMIT waits for the synchronous standby as a payment's would,
// so a primary whose standby is gone, a demoted one (25006) and one that
// no connection reaches all fail it. Its error is ErrUnavailable, saying
// why; nil means ready.
func ProbeCommit(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = ProbeTimeout
	}
	return WithTx(ctx, pool, TxOptions{Isolation: pgx.ReadCommitted, Timeout: timeout, Attempts: 1},
		func(ctx context.Context, tx *Tx) error {
			standby, err := probeQueries.InRecovery(ctx, tx)
			if err != nil {
				return err
			}
			if standby {
				return fmt.Errorf("%w: the server is a standby (pg_is_in_recovery)", ErrUnavailable)
			}
			if err := probeQueries.ProbeCommit(ctx, tx.Queued()); err != nil { // sent with the COMMIT
				return err
			}
			return nil
		})
}
