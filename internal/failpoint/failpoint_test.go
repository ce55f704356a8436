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

// An unknown name is refused with the known ones listed once each, sorted,
// and the known name it is likely a typo of.
func TestCheckNames_listsEachKnownNameOnceAndSuggestsTheNearest(t *testing.T) {
	s, err := failpoint.Parse("after_comit:payment_created=crash")
	require.NoError(t, err)
	known := []string{"before_commit:started", "after_commit:payment_created", "before_commit:started", "after_commit:payment_created"}
	err = s.CheckNames(known)
	require.ErrorIs(t, err, failpoint.ErrUnknown)
	require.Equal(t, "unknown failpoint: after_comit:payment_created (did you mean after_commit:payment_created?) "+
		"(known: after_commit:payment_created, before_commit:started)", err.Error())
	require.Len(t, known, 4, "the caller's list is left as it was")

	s, err = failpoint.Parse("nonsense:xyz=crash")
	require.NoError(t, err)
	require.NotContains(t, s.CheckNames(known).Error(), "did you mean")
}
