package dbtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

func TestNewPool_givesEachTestItsOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := dbtest.NewPool(t), dbtest.NewPool(t)

	var nameA, nameB string
	require.NoError(t, a.QueryRow(ctx, "SELECT current_database()").Scan(&nameA))
	require.NoError(t, b.QueryRow(ctx, "SELECT current_database()").Scan(&nameB))
	require.NotEqual(t, nameA, nameB)

	// Migrated: the schema's tables exist.
	_, err := a.Exec(ctx, "INSERT INTO users (email) VALUES ('a@example.com')")
	require.NoError(t, err)
	// Isolated: what one test writes, another does not see.
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM users").Scan(&n))
	require.Zero(t, n)
}

func TestNewURL_dropsTheDatabaseWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var name string
	t.Run("inner", func(t *testing.T) {
		pool := dbtest.NewPool(t)
		require.NoError(t, pool.QueryRow(ctx, "SELECT current_database()").Scan(&name))
	})
	other := dbtest.NewPool(t)
	var exists bool
	require.NoError(t, other.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists, "database %s should be dropped after its test", name)
}

// BenchmarkNewURL measures what a fresh test database costs.
func BenchmarkNewURL(b *testing.B) {
	dbtest.NewURL(b) // the cluster and template are shared; leave them out
	b.ResetTimer()
	for b.Loop() {
		dbtest.NewURL(b) // dropped when the benchmark ends
	}
}
