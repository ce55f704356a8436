package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
)

// A transaction that kept conflicting with requests for other keys is the
// service's trouble, not a key in use: 503 with Retry-After (rule 5 never
// allows a 409 for a key no other request holds), resumable by a retry.
// A key in use, or one whose lock another attempt took, stays 409.
func TestProblemFor_serializationIs503AndInUseIs409(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
		code   problem.Code
	}{
		{fmt.Errorf("recording: %w", db.ErrSerialization), http.StatusServiceUnavailable, problem.PaymentProcessorUnavailable},
		{recovery.ErrKeyInUse, http.StatusConflict, problem.IdempotencyKeyInUse},
		{recovery.ErrLockLost, http.StatusConflict, problem.IdempotencyKeyInUse},
	} {
		p := problemFor(tc.err)
		require.Equal(t, tc.status, p.Status, "%v", tc.err)
		require.Equal(t, tc.code, p.Code, "%v", tc.err)
		require.Positive(t, p.RetryAfter, "%v", tc.err)
	}
}
