package dbtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/example/payments/internal/db/dbsqlc"
)

// Plan is what EXPLAIN (ANALYZE, BUFFERS) said of one statement.
type Plan struct {
	// Nodes are the plan's nodes, top-down: the node type, and the index
	// it reads, or else the table ("Index Scan receipts_due_idx", "Seq
	// Scan receipts").
	Nodes []string
	// Buffers are the shared buffers the statement hit and read.
	Buffers int64
}

// String is the plan on one line, for a test's log.
func (p Plan) String() string { return strings.Join(p.Nodes, " > ") }

// Explain runs EXPLAIN (ANALYZE, BUFFERS) in tx on the statement that query
// sends, as sqlc wrote it: query gets a dbsqlc.DBTX that records the
// statement and its arguments and sends nothing. ANALYZE executes it: give
// a transaction the test rolls back when the statement writes.
func Explain(t testing.TB, tx pgx.Tx, query func(dbsqlc.DBTX) error) Plan {
	t.Helper()
	var rec sqlRecorder
	if err := query(&rec); !errors.Is(err, errRecorded) && rec.sql == "" {
		t.Fatalf("dbtest.Explain: the query sent nothing to record: %v", err)
	}
	var raw []byte
	if err := tx.QueryRow(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+rec.sql, rec.args...).Scan(&raw); err != nil {
		t.Fatalf("dbtest.Explain: %v", err)
	}
	var explained []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &explained); err != nil || len(explained) != 1 {
		t.Fatalf("dbtest.Explain: reading the plan: %v", err)
	}
	top := explained[0].Plan
	p := Plan{Buffers: top.SharedHit + top.SharedRead}
	var walk func(n planNode)
	walk = func(n planNode) {
		p.Nodes = append(p.Nodes, strings.TrimSpace(n.Type+" "+cmp.Or(n.Index, n.Relation)))
		for _, kid := range n.Plans {
			walk(kid)
		}
	}
	walk(top)
	return p
}

type planNode struct {
	Type       string     `json:"Node Type"`
	Index      string     `json:"Index Name"`
	Relation   string     `json:"Relation Name"`
	SharedHit  int64      `json:"Shared Hit Blocks"`
	SharedRead int64      `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

// sqlRecorder is a dbsqlc.DBTX that keeps the statement a query would
// send, and its arguments, and sends nothing.
type sqlRecorder struct {
	sql  string
	args []any
}

var errRecorded = errors.New("dbtest: recorded, not sent")

func (r *sqlRecorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, errRecorded
}

func (r *sqlRecorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errRecorded
}

func (r *sqlRecorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return recordedRow{}
}

// recordedRow is the row of a statement that was recorded, not sent.
type recordedRow struct{}

func (recordedRow) Scan(...any) error { return errRecorded }
