package db

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// PoolConfig sizes the pool.
type PoolConfig struct {
	// MaxConns is the most connections the pool opens. Default
	// DefaultMaxConns().
	MaxConns int32
	// Tracer, when set, sees every statement (the benchmark counts them).
	// With tracing on, the statements are spans too (queryTracer).
	Tracer pgx.QueryTracer
	// TxTimeout is the deadline of every transaction WithTx runs on the
	// pool (TxOptions.Timeout). Default DefaultTxTimeout.
	TxTimeout time.Duration
}

// txTimeouts holds each open pool's PoolConfig.TxTimeout, by a weak
// pointer to the pool, so that WithTx, which every caller hands only the
// pool, applies it to every transaction without each caller carrying the
// setting; an entry goes when its pool is garbage.
var txTimeouts sync.Map // weak.Pointer[pgxpool.Pool] -> time.Duration

func setTxTimeout(pool *pgxpool.Pool, d time.Duration) {
	if d <= 0 {
		d = DefaultTxTimeout
	}
	wp := weak.Make(pool)
	txTimeouts.Store(wp, d)
	runtime.AddCleanup(pool, func(wp weak.Pointer[pgxpool.Pool]) { txTimeouts.Delete(wp) }, wp)
}

// TxTimeout is the deadline of the transactions WithTx runs on pool: its
// PoolConfig.TxTimeout, or DefaultTxTimeout for a pool Open did not make.
func TxTimeout(pool *pgxpool.Pool) time.Duration {
	if d, ok := txTimeouts.Load(weak.Make(pool)); ok {
		return d.(time.Duration)
	}
	return DefaultTxTimeout
}

// DefaultMaxConns is four connections per core (GOMAXPROCS). A request
// holds a connection only for a transaction, and a transaction spends part
// of its life waiting for its commit to be flushed; with a few more
// connections than cores, others use the CPU meanwhile. Measured with
// `make bench` on 2 cores, new payments at 16 clients: 4 connections (pgxpool's
// default here) 1,160 req/s, 6: 1,210, 8: 1,360, 12: 1,370, 16: 1,040.
func DefaultMaxConns() int32 { return int32(4 * runtime.GOMAXPROCS(0)) }

// Open connects a pool to the database at url and checks that it answers.
func Open(ctx context.Context, url string, cfg PoolConfig) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	pcfg.MaxConns = DefaultMaxConns()
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	pcfg.ConnConfig.Tracer = queryTracer(cfg.Tracer)
	pcfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		// google/uuid's UUID is sent and read as PostgreSQL's binary uuid;
		// without this, pgx goes through its database/sql interfaces,
		// formatting and parsing text on every statement.
		pgxuuid.Register(conn.TypeMap())
		registerUUIDPointer(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	setTxTimeout(pool, cfg.TxTimeout)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	return pool, nil
}

// registerUUIDPointer sends a *uuid.UUID (sqlc's type for a nullable uuid
// column) as the uuid it points to, or NULL. pgx will not follow a pointer
// that is itself a database/sql Valuer, as *uuid.UUID is: it would call
// Value, try to send the text binary, fail, format an error, parse the text
// back and send that, spending more per value than the rest of a statement's
// encoding (5 % of the service's CPU in a create, in a profile).
func registerUUIDPointer(tm *pgtype.Map) {
	tm.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDPointer}, tm.TryWrapEncodePlanFuncs...)
}

func tryWrapUUIDPointer(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if _, ok := value.(*uuid.UUID); ok {
		return &uuidPointerPlan{}, uuid.UUID{}, true
	}
	return nil, nil, false
}

type uuidPointerPlan struct{ next pgtype.EncodePlan }

func (p *uuidPointerPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidPointerPlan) Encode(value any, buf []byte) ([]byte, error) {
	u := value.(*uuid.UUID)
	if u == nil {
		return nil, nil // NULL
	}
	return p.next.Encode(*u, buf)
}
