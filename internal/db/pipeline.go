package db

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tx is the transaction WithTx hands its callback. It spends as few round
// trips to PostgreSQL as it can, because the engine's and the flows'
// requests are mostly round trips. Its mechanism, pipelining, has three
// parts:
//
//   - BEGIN is not sent on its own: it goes with the transaction's first
//     statement (one round trip less per transaction);
//   - a statement whose result nobody reads (an audit record, a staged job,
//     a fenced move of a key) can be queued with Queued: it goes with the
//     next statement whose result is read, or with COMMIT;
//   - a transaction that sent nothing commits without a round trip.
//
// Statements still run one after the other, in the order they were issued,
// inside one transaction: only the waiting is saved. The price is that a
// queued statement's error surfaces at the next statement sent (which then
// returns it instead of its own result), or at Commit. Any error aborts
// the transaction anyway, so the callback only has to return it. Flush
// sends what waits at once, for a caller that wants BEGIN alone.
//
// Tx implements the interface sqlc's queries take (dbsqlc.DBTX), and
// pgx.Tx for libraries that take one (River's InsertManyTx); the
// transaction is WithTx's to end, so its Commit, Rollback and Begin
// refuse. It is not safe for concurrent use, and lives only inside WithTx.
type Tx struct {
	conn   *pgx.Conn
	begin  string   // the BEGIN statement until it is sent, then ""
	queued []queued // statements waiting for the next round trip
}

var _ pgx.Tx = (*Tx)(nil)

type queued struct {
	sql   string
	args  []any
	later func(q QueuedTx) error // QueueLater's: makes the statement when the queue is sent
}

// Flush sends, in one round trip, BEGIN if it has not gone yet and the
// queued statements, and returns the first error among them. BEGIN alone
// goes as a simple query, as pgx's own BeginTx sends it.
func (tx *Tx) Flush(ctx context.Context) error {
	if err := tx.makeLater(); err != nil {
		return err
	}
	if tx.begin == "" && len(tx.queued) == 0 {
		return nil
	}
	if len(tx.queued) == 0 {
		_, err := tx.conn.Exec(ctx, tx.begin)
		tx.begin = ""
		return err
	}
	b := &pgx.Batch{}
	if tx.begin != "" {
		b.Queue(tx.begin)
	}
	for _, q := range tx.queued {
		b.Queue(q.sql, q.args...)
	}
	tx.begin, tx.queued = "", nil
	return tx.conn.SendBatch(ctx, b).Close()
}

// Queued returns tx as a dbsqlc.DBTX whose Exec does not send its
// statement: it queues it for the next round trip, and reports success. Use
// it for writes whose result the transaction does not read; their errors
// surface later (see Tx). Query and QueryRow are tx's own.
func (tx *Tx) Queued() QueuedTx { return QueuedTx{tx} }

// QueuedTx is a Tx whose Exec queues (see Tx.Queued).
type QueuedTx struct{ tx *Tx }

// Exec queues sql for the next round trip.
func (q QueuedTx) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.tx.queued = append(q.tx.queued, queued{sql: sql, args: args})
	return pgconn.CommandTag{}, nil
}

// QueueLater queues, in this place, a statement that is made only when the
// queue is sent (by the next statement whose result is read, Flush or
// COMMIT): then make queues it on q, and what it queues takes this place.
// Until then the caller may still change what the statement will be (a
// new key's insert, say, that can take the key's move in the same
// transaction instead of an update of the row after it). make must only
// queue (q.Exec); its error fails the statement that sends the queue. A
// transaction rolled back before sending never calls it.
func (tx *Tx) QueueLater(make func(q QueuedTx) error) {
	tx.queued = append(tx.queued, queued{later: make})
}

// makeLater makes every statement QueueLater queued, in its place.
func (tx *Tx) makeLater() error {
	for i, q := range tx.queued {
		if q.later == nil {
			continue
		}
		all := tx.queued
		tx.queued = all[:i:i]
		if err := q.later(QueuedTx{tx}); err != nil {
			tx.queued = all // left as it was: whatever sends it next fails too
			return err
		}
		tx.queued = append(tx.queued, all[i+1:]...)
		return tx.makeLater() // the rest may hold more
	}
	return nil
}

// Query is Tx.Query.
func (q QueuedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return q.tx.Query(ctx, sql, args...)
}

// QueryRow is Tx.QueryRow.
func (q QueuedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return q.tx.QueryRow(ctx, sql, args...)
}

// Exec sends sql, with whatever waits to be sent, and returns its command tag.
func (tx *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := tx.makeLater(); err != nil {
		return pgconn.CommandTag{}, err
	}
	if tx.nothingWaits() {
		return tx.conn.Exec(ctx, sql, args...)
	}
	br, err := tx.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, firstError(err, br.Close())
	}
	tag, err := br.Exec()
	return tag, firstError(err, br.Close())
}

// QueryRow sends sql, with whatever waits to be sent; the row is read by Scan.
func (tx *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := tx.makeLater(); err != nil {
		return errRow{err}
	}
	if tx.nothingWaits() {
		return tx.conn.QueryRow(ctx, sql, args...)
	}
	br, err := tx.send(ctx, sql, args)
	if err != nil {
		return errRow{firstError(err, br.Close())}
	}
	return batchRow{br}
}

// Query sends sql, with whatever waits to be sent; the rows must be closed.
func (tx *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := tx.makeLater(); err != nil {
		return nil, err
	}
	if tx.nothingWaits() {
		return tx.conn.Query(ctx, sql, args...)
	}
	br, err := tx.send(ctx, sql, args)
	if err != nil {
		return nil, firstError(err, br.Close())
	}
	rows, err := br.Query()
	if err != nil {
		return nil, firstError(err, br.Close())
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// nothingWaits tells that BEGIN has gone and nothing is queued: a
// statement then goes alone, as pgx's own Tx sends it, without a batch.
func (tx *Tx) nothingWaits() bool { return tx.begin == "" && len(tx.queued) == 0 }

// send sends, in one round trip, BEGIN if it has not gone yet, the queued
// statements and then sql, and reads every result before sql's: the
// returned batch is positioned at sql's result. An error of an earlier
// statement is returned (the batch must still be closed).
func (tx *Tx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	if tx.begin != "" {
		b.Queue(tx.begin)
	}
	for _, q := range tx.queued {
		b.Queue(q.sql, q.args...)
	}
	b.Queue(sql, args...)
	earlier := b.Len() - 1
	br := tx.conn.SendBatch(ctx, b)
	tx.begin, tx.queued = "", nil
	for range earlier {
		if _, err := br.Exec(); err != nil {
			return br, err
		}
	}
	return br, nil
}

// commit sends what is queued and COMMIT, in one round trip; a transaction
// that never sent anything has nothing to commit.
func (tx *Tx) commit(ctx context.Context) error {
	if tx.begin != "" && len(tx.queued) == 0 {
		return nil
	}
	var tag pgconn.CommandTag
	var err error
	if len(tx.queued) == 0 {
		tag, err = tx.conn.Exec(ctx, "COMMIT") // alone, as a simple query, as pgx's own Tx sends it
	} else {
		tag, err = tx.Exec(ctx, "COMMIT")
	}
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" { // the transaction had failed; COMMIT rolled it back
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// rollbackWithoutCancel rolls back whatever is left open, even when ctx is
// already cancelled. After a commit (or when nothing was sent) it does not
// touch the connection.
func (tx *Tx) rollbackWithoutCancel(ctx context.Context) {
	if tx.conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := tx.conn.Exec(ctx, "ROLLBACK"); err != nil {
		// The connection is in an unknown state: close it, so the pool
		// replaces it rather than handing a half-open transaction out.
		_ = tx.conn.Close(ctx)
	}
}

// errEndedByWithTx is what Commit, Rollback and Begin answer.
var errEndedByWithTx = errors.New("db.Tx: the transaction is db.WithTx's to end or nest; return from the callback instead")

// Commit refuses: WithTx commits when the callback returns nil.
func (tx *Tx) Commit(context.Context) error { return errEndedByWithTx }

// Rollback refuses: WithTx rolls back when the callback returns an error.
func (tx *Tx) Rollback(context.Context) error { return errEndedByWithTx }

// Begin refuses: a Tx does not nest.
func (tx *Tx) Begin(context.Context) (pgx.Tx, error) { return nil, errEndedByWithTx }

// CopyFrom sends what waits, then copies.
func (tx *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if err := tx.Flush(ctx); err != nil {
		return 0, err
	}
	return tx.conn.CopyFrom(ctx, table, columns, rows)
}

// SendBatch sends what waits, then b. If what waited failed, the
// transaction is aborted and b's statements report it.
func (tx *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	_ = tx.Flush(ctx)
	return tx.conn.SendBatch(ctx, b)
}

// LargeObjects is not supported: nothing here uses them.
func (tx *Tx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Prepare prepares sql on the transaction's connection.
func (tx *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return tx.conn.Prepare(ctx, name, sql)
}

// Conn is the transaction's connection.
func (tx *Tx) Conn() *pgx.Conn { return tx.conn }

// batchRow is the last result of a batch, read as one row.
type batchRow struct{ br pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	return firstError(err, r.br.Close())
}

// errRow is a row that could not be read.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// batchRows are the last result of a batch, read as rows; closing them
// closes the batch.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closeErr error
	closed   bool
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.closeErr = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	return firstError(r.Rows.Err(), r.closeErr)
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
