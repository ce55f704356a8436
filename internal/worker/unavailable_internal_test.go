package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
)

// Issue 39: a job that failed because the database could not commit is
// snoozed (River counts no attempt), as a transient failure; any other
// failure, and a job's own snooze or cancel, passes through as it was.
func TestSnoozeWhileDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	mw := &snoozeWhileDatabaseUnavailable{}
	run := func(err error) error {
		return mw.Work(context.Background(), &rivertype.JobRow{}, func(context.Context) error { return err })
	}
	for _, err := range []error{
		fmt.Errorf("%w: %w", db.ErrUnavailable, io.ErrUnexpectedEOF),
		recovery.Transient(fmt.Errorf("%w: commit", db.ErrUnavailable)),
	} {
		var snooze *rivertype.JobSnoozeError
		require.ErrorAs(t, run(err), &snooze, "%v", err)
		require.Equal(t, unavailableSnooze, snooze.Duration)
	}
	require.NoError(t, run(nil))
	for _, other := range []error{errors.New("a mail server said no"), fmt.Errorf("smtp: %w", io.ErrUnexpectedEOF)} {
		require.ErrorIs(t, run(other), other, "not the database's")
	}
	cancel := river.JobCancel(fmt.Errorf("%w", db.ErrUnavailable))
	require.Equal(t, cancel, run(cancel), "the job's own cancel")
}
