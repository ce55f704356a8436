package db_test

import (
	"context"
	"runtime"
	"testing"

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
