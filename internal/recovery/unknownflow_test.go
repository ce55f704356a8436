package recovery_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

// A build that does not declare a flow (an older one, after a rollback)
// learns at start-up how many unfinished keys of that flow it cannot
// finish; finished keys, and keys of flows it declares, are not counted.
func TestUnfinishedKeysOfUnknownFlows_countsWhatThisBuildCannotFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	_, err := b.execute(t, 1, "done", `{"name":"lamp"}`)
	require.NoError(t, err)
	b.remote.fail.Store(2)
	for _, key := range []string{"left-1", "left-2"} {
		_, err := b.execute(t, 1, key, `{"name":"lamp"}`)
		require.True(t, recovery.IsTransient(err), "%v", err)
	}

	unknown, err := b.engine.UnfinishedKeysOfUnknownFlows(ctx)
	require.NoError(t, err)
	require.Empty(t, unknown, "the build that declares the flow can finish its keys")

	older := newEngine(t, recovery.Config{Pool: b.pool}) // declares no flow
	unknown, err = older.UnfinishedKeysOfUnknownFlows(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"thing": 2}, unknown)
}
