package db_test

import (
	"fmt"

	"context"
	"runtime"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/stretchr/testify/require"
)

func TestOpen_defaultsToFourConnectionsPerCore(t *testing.T) {
	t.Parallel()
	pool, err := db.Open(context.Background(), dbtest.NewURL(t), db.PoolConfig{})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.EqualValues(t, 4*runtime.GOMAXPROCS(0), pool.Config().MaxConns)
	require.Equal(t, db.DefaultMaxConns(), pool.Config().MaxConns)

	sized, err := db.Open(context.Background(), dbtest.NewURL(t), db.PoolConfig{MaxConns: 3})
	require.NoError(t, err)
	t.Cleanup(sized.Close)
	require.EqualValues(t, 3, sized.Config().MaxConns)
}

// A nullable uuid column's *uuid.UUID is sent in binary, as a uuid.UUID is,
// and nil as NULL; both read back as they were.
func TestOpen_sendsUUIDPointersInBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.NewURL(t), db.PoolConfig{})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	u := uuid.New()
	plan := conn.Conn().TypeMap().PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, &u)
	require.NotNil(t, plan)
	// pgx's fallback for a database/sql Valuer goes through text.
	require.NotContains(t, fmt.Sprintf("%T", plan), "DriverValuer")
	buf, err := plan.Encode(&u, nil)
	require.NoError(t, err)
	require.Equal(t, u[:], buf)

	var back *uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, "SELECT $1::uuid", &u).Scan(&back))
	require.Equal(t, u, *back)
	var null *uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, "SELECT $1::uuid", null).Scan(&back))
	require.Nil(t, back)
}
