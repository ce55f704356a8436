package recovery_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/recovery"
)

// Issue 20, item 10: a key that another instance finished is, to this
// instance's key filter, "definitely new". The claim ran the first phase
// and wrote the key row last, so whatever went wrong in that phase (here an
// error before its commit) was the answer: an internal error where the
// replay, or 422 for another body, was right. The claim now writes the key
// row first, and the unique index decides before the phase runs.
func TestExecute_aKeyAnotherInstanceFinishedGetsTheCarefulAnswerWhateverTheFirstPhaseDoes(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		body    string
		wantErr error // nil: the replay
	}{
		"the same request is replayed":  {body: `{"name":"lamp"}`},
		"another request is 422 reused": {body: `{"name":"desk"}`, wantErr: recovery.ErrKeyReused},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, recovery.Config{KeyFilter: readyEmpty(t, nil)})
			first, err := b.execute(t, 1, "k1", `{"name":"lamp"}`)
			require.NoError(t, err)

			// A second instance: its filter never saw k1, and its first
			// phase fails before it commits.
			failing, err := failpoint.Parse("before_commit:" + string(thingCreated) + "=error")
			require.NoError(t, err)
			other := b.newEngine(t, recovery.Config{KeyFilter: readyEmpty(t, nil), Failpoints: failing})
			resp, err := other.Execute(context.Background(), b.request(1, "k1", tc.body))
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
				require.True(t, resp.Replayed)
				require.Equal(t, first.Body, resp.Body)
			}
			require.Equal(t, 1, b.count(t, "SELECT count(*) FROM things"), "the first phase ran once")
			require.EqualValues(t, 1, b.remote.calls.Load())
		})
	}
}
