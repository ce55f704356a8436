package failpoint_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/failpoint"
)

func TestParseAndFire(t *testing.T) {
	t.Parallel()
	s, err := failpoint.Parse("before_commit:payment_created=error, after_commit:finished=sleep:30")
	require.NoError(t, err)

	require.ErrorIs(t, s.Fire("before_commit:payment_created"), failpoint.ErrInjected)
	start := time.Now()
	require.NoError(t, s.Fire("after_commit:finished"))
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
	require.NoError(t, s.Fire("after_call:payment_intent"), "points not listed do nothing")

	var none *failpoint.Set
	require.NoError(t, none.Fire("anything"))
	empty, err := failpoint.Parse("  ")
	require.NoError(t, err)
	require.Nil(t, empty)
}

func TestParse_rejectsNonsense(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"nameonly", "=crash", "x=explode", "x=sleep:", "x=sleep:-5", "x=sleep:soon"} {
		_, err := failpoint.Parse(spec)
		require.Error(t, err, spec)
	}
}
