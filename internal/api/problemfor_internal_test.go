package api

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/currency"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/safehttp"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/telemetry"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooks"
)

// apiCodes are the codes of docs/API.md section 2 (and method_not_allowed):
// the only ones an answer may carry.
var apiCodes = []problem.Code{
	"unauthorized", "not_found", "validation_failed", "unsupported_media_type", "body_too_large",
	"idempotency_key_missing", "idempotency_key_invalid", "idempotency_key_reused", "idempotency_key_in_use",
	"card_declined", "refund_not_allowed", "payment_not_capturable", "payment_processor_unavailable",
	"service_unavailable", "payment_processing", "idempotency_key_needs_attention", "rate_limited", "method_not_allowed",
	"webhook_signature_invalid", "internal",
}

// answeredSentinels is every exported sentinel error of the packages api is
// built on that can reach an HTTP answer, with the answer it gets. Each
// must be a 4xx or a 503, with a code of the contract.
var answeredSentinels = map[string]struct {
	err    error
	status int
	code   problem.Code
}{
	"recovery.ErrKeyReused":             {recovery.ErrKeyReused, 422, problem.IdempotencyKeyReused},
	"recovery.ErrKeyInUse":              {recovery.ErrKeyInUse, 409, problem.IdempotencyKeyInUse},
	"recovery.ErrLockLost":              {recovery.ErrLockLost, 409, problem.IdempotencyKeyInUse},
	"recovery.ErrNeedsAttention":        {recovery.ErrNeedsAttention, 409, problem.IdempotencyKeyNeedsAttention},
	"recovery.ErrChildKeySpent":         {recovery.ErrChildKeySpent, 503, problem.PaymentProcessorUnavailable},
	"recovery.ErrKeyNotFound":           {recovery.ErrKeyNotFound, 404, problem.NotFound},
	"recovery.ErrNotRetryable":          {recovery.ErrNotRetryable, 409, problem.IdempotencyKeyInUse},
	"db.ErrSerialization":               {db.ErrSerialization, 503, problem.PaymentProcessorUnavailable},
	"db.ErrUnavailable":                 {db.ErrUnavailable, 503, problem.ServiceUnavailable},
	"db.ErrTemporary":                   {db.ErrTemporary, 503, problem.ServiceUnavailable},
	"db.ErrLockNotHeld":                 {db.ErrLockNotHeld, 409, problem.IdempotencyKeyInUse},
	"payments.ErrNotFound":              {payments.ErrNotFound, 404, problem.NotFound},
	"payments.ErrRefundNotFound":        {payments.ErrRefundNotFound, 404, problem.NotFound},
	"payments.ErrPaymentProcessing":     {payments.ErrPaymentProcessing, 409, problem.PaymentProcessing},
	"events.ErrNotFound":                {events.ErrNotFound, 404, problem.NotFound},
	"merchanthooks.ErrEndpointNotFound": {merchanthooks.ErrEndpointNotFound, 404, problem.NotFound},
	"merchanthooks.ErrInvalid":          {merchanthooks.ErrInvalid, 400, problem.ValidationFailed},
	"safehttp.ErrInvalidURL":            {safehttp.ErrInvalidURL, 400, problem.ValidationFailed},
	"users.ErrUnknownKey":               {users.ErrUnknownKey, 401, problem.Unauthorized},
	"webhooks.ErrSignature":             {webhooks.ErrSignature, 400, problem.WebhookSignatureInvalid},
	"currency.ErrUnsupported":           {currency.ErrUnsupported, 400, problem.ValidationFailed},
	"currency.ErrAmountTooSmall":        {currency.ErrAmountTooSmall, 400, problem.ValidationFailed},
	"currency.ErrAmountTooLarge":        {currency.ErrAmountTooLarge, 400, problem.ValidationFailed},
	"stripeclient.ErrChildKeySpent":     {stripeclient.ErrChildKeySpent, 503, problem.PaymentProcessorUnavailable},
}

// bugSentinels are the sentinels that mean a bug or a deliberately injected
// fault, never an answer to input or to the world: for them 500 internal
// is the honest answer (as for an unknown error). Each says why; adding
// one here is a decision to make in review.
var bugSentinels = map[string]struct {
	err error
	why string
}{
	"recovery.ErrFailed":               {recovery.ErrFailed, "a phase failed with an error no retry can cure (a constraint a flow's write violates, a bug): the service's fault, answered 500 with a detail saying the key waits for an operator"},
	"db.ErrUniqueViolation":            {db.ErrUniqueViolation, "a unique violation no one explained: the claim looks the key up again, the engine reads one after a takeover as a lost lock and fails the key for any other (recovery.ErrFailed), the webhook receiver takes it for a duplicate delivery; reaching the API, it is a bug"},
	"recovery.ErrUnknownRecoveryPoint": {recovery.ErrUnknownRecoveryPoint, "a key at a point its flow has no phase for: a bug in a flow's declaration"},
	"failpoint.ErrInjected":            {failpoint.ErrInjected, "PAYMENTS_FAILPOINTS' `error` action: docs/API.md section 6 defines it as an internal error"},
	"stripeclient.ErrNoIdempotencyKey": {stripeclient.ErrNoIdempotencyKey, "a mutating Stripe call made without a child key: a bug in a flow"},
	"stripeclient.ErrLiveKeyRefused":   {stripeclient.ErrLiveKeyRefused, "refused at start-up, before any request is served"},
	"telemetry.ErrSettings":            {telemetry.ErrSettings, "tracing settings, refused at start-up"},
	"stagedjobs.ErrBadMessage":         {stagedjobs.ErrBadMessage, "a receipt the mailer cannot send: background work, never a request's answer"},
	"recovery.ErrBadFlow":              {recovery.ErrBadFlow, "a flow declared wrong, refused when it is registered at start-up"},
	"recovery.ErrUndeclaredMove":       {recovery.ErrUndeclaredMove, "a phase moving its key where its step did not declare: a bug in a flow, nothing committed"},
	"recovery.ErrUnregisteredFlow":     {recovery.ErrUnregisteredFlow, "a request run through a flow the engine was not given: a bug in how the service is built"},
	"failpoint.ErrUnknown":             {failpoint.ErrUnknown, "a failpoint no flow declares, refused at start-up"},
	"safehttp.ErrNonPublicAddress":     {safehttp.ErrNonPublicAddress, "a webhook delivery's refused connection: background work, worded into its last_error (safehttp.Describe), never a request's answer"},
	"safehttp.ErrOwnAddress":           {safehttp.ErrOwnAddress, "a webhook delivery's refused connection: background work, worded into its last_error (safehttp.Describe), never a request's answer"},
	"keyfilter.ErrSnapshotUnusable":    {keyfilter.ErrSnapshotUnusable, "a key filter snapshot refused at start-up, which then rebuilds the filter: never a request's answer"},
}

// Every exported sentinel of the packages api is built on becomes one
// answer, in problemFor alone: a 4xx or 503 with a code of the contract,
// or (a bug, listed in bugSentinels with its reason) 500 internal, as an
// unknown error is. The sentinels are found by parsing the packages'
// source (go/parser: every package-level `var Err... = errors.New(...)`
// in the module packages api imports, directly or not), not by a list
// kept by hand, so a new sentinel fails this test until it is given its
// answer in problemFor and its row above.
func TestProblemFor_everySentinelHasItsAnswer(t *testing.T) {
	t.Parallel()
	found := parseSentinels(t)
	var listed []string
	for name := range answeredSentinels {
		listed = append(listed, name)
	}
	for name := range bugSentinels {
		listed = append(listed, name)
	}
	sort.Strings(listed)
	require.Equal(t, found, listed, "every sentinel found in the source has its row in answeredSentinels or bugSentinels, and every row a sentinel")

	for name, want := range answeredSentinels {
		for _, err := range []error{want.err, fmt.Errorf("doing something: %w", want.err)} {
			p := problemFor(err)
			require.Equal(t, want.status, p.Status, "%s", name)
			require.Equal(t, want.code, p.Code, "%s", name)
			require.True(t, p.Status == http.StatusServiceUnavailable || (p.Status >= 400 && p.Status < 500), "%s: a 4xx or 503", name)
			require.Contains(t, apiCodes, p.Code, "%s: a code of the contract", name)
			require.NotEmpty(t, p.Detail, name)
			if p.Status == http.StatusServiceUnavailable || p.Code == problem.IdempotencyKeyInUse || p.Code == problem.PaymentProcessing {
				require.Positive(t, p.RetryAfter, "%s: says when to retry", name)
			}
		}
	}
	for name, bug := range bugSentinels {
		p := problemFor(fmt.Errorf("doing something: %w", bug.err))
		require.Equal(t, http.StatusInternalServerError, p.Status, "%s (%s)", name, bug.why)
		require.Equal(t, problem.Internal, p.Code, name)
	}
	p := problemFor(errors.New("something nobody expected"))
	require.Equal(t, http.StatusInternalServerError, p.Status)
	require.Equal(t, problem.Internal, p.Code)
	require.NotContains(t, p.Detail, "nobody expected", "an unknown error's text stays in the log")
}

// Issue 39: a connection-class failure is 503 service_unavailable with
// Retry-After, however it arrives: translated by db.WithTx, straight from
// the driver (a statement run on the pool), or marked transient by the
// engine; never 500, and never taken for a Stripe outage. A request
// whose own context ended is still the interrupted request it was.
func TestProblemFor_connectionClassFailuresAreServiceUnavailable(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("%w: %w", db.ErrUnavailable, &pgconn.PgError{Code: "57P01"}),
		&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Severity: "ERROR", Code: "25006", Message: "cannot execute UPDATE in a read-only transaction"},
		recovery.Transient(fmt.Errorf("%w: commit: %w", db.ErrUnavailable, io.ErrUnexpectedEOF)),
		// A read on the pool whose connection broke, as pgx reports it
		// bare (make chaos-ha answered 500 to it).
		fmt.Errorf("failed to deallocate cached statement(s): %w", io.ErrUnexpectedEOF),
	} {
		p := problemFor(err)
		require.Equal(t, http.StatusServiceUnavailable, p.Status, "%v", err)
		require.Equal(t, problem.ServiceUnavailable, p.Code, "%v", err)
		require.Equal(t, 2, p.RetryAfter, "%v: README, \"The database's machine dies\"", err)
	}
	require.Equal(t, problem.PaymentProcessorUnavailable, problemFor(context.Canceled).Code)
	require.Equal(t, problem.PaymentProcessorUnavailable, problemFor(recovery.Transient(fmt.Errorf("stripe: %w", io.ErrUnexpectedEOF))).Code,
		"a network failure of Stripe's is not the database's")
}

// A statement the server cut short by its own limit (a statement_timeout
// or lock_timeout an operator set) or a resource it ran short of is 503
// service_unavailable, as it comes from WithTx or straight from the pool:
// never 500, which would say the request itself cannot succeed.
func TestProblemFor_aServerLimitIsServiceUnavailable(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("%w: %w", db.ErrTemporary, &pgconn.PgError{Code: "57014"}),
		&pgconn.PgError{Severity: "ERROR", Code: "57014", Message: "canceling statement due to statement timeout"},
		&pgconn.PgError{Severity: "ERROR", Code: "55P03", Message: "canceling statement due to lock timeout"},
		&pgconn.PgError{Severity: "ERROR", Code: "53100", Message: "could not extend file: No space left on device"},
	} {
		p := problemFor(err)
		require.Equal(t, http.StatusServiceUnavailable, p.Status, "%v", err)
		require.Equal(t, problem.ServiceUnavailable, p.Code, "%v", err)
		require.Positive(t, p.RetryAfter, "%v", err)
	}
	require.Equal(t, problem.Internal, problemFor(&pgconn.PgError{Code: "23514"}).Code, "a check violation is no limit")
}

// The problem package's codes are the contract's.
func TestProblemFor_codesAreTheContracts(t *testing.T) {
	t.Parallel()
	for _, c := range []problem.Code{problem.Unauthorized, problem.NotFound, problem.MethodNotAllowed, problem.ValidationFailed,
		problem.UnsupportedMediaType, problem.BodyTooLarge, problem.IdempotencyKeyMissing, problem.IdempotencyKeyInvalid,
		problem.IdempotencyKeyReused, problem.IdempotencyKeyInUse, problem.CardDeclined, problem.RefundNotAllowed,
		problem.PaymentNotCapturable, problem.PaymentProcessorUnavailable, problem.ServiceUnavailable, problem.PaymentProcessing,
		problem.IdempotencyKeyNeedsAttention, problem.WebhookSignatureInvalid, problem.RateLimited, problem.Internal} {
		require.Contains(t, apiCodes, c)
	}
}

// parseSentinels returns "pkg.ErrName" for every package-level variable
// named Err... whose value is errors.New(...) or fmt.Errorf(...), in the
// non-test source of every package of this module that api imports,
// directly or not.
func parseSentinels(t *testing.T) []string {
	t.Helper()
	const module = "github.com/example/payments/"
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	seen := map[string]bool{}
	queue := []string{"internal/api"}
	var sentinels []string
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		if seen[dir] {
			continue
		}
		seen[dir] = true
		entries, err := os.ReadDir(filepath.Join(root, dir))
		require.NoError(t, err)
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(gotoken.NewFileSet(), filepath.Join(root, dir, name), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if rest, ok := strings.CutPrefix(path, module); ok {
					queue = append(queue, rest)
				}
			}
			if dir == "internal/api" {
				continue // api's own errors are problems already
			}
			for _, decl := range f.Decls {
				gen, ok := decl.(*ast.GenDecl)
				if !ok || gen.Tok != gotoken.VAR {
					continue
				}
				for _, spec := range gen.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if !strings.HasPrefix(id.Name, "Err") || !id.IsExported() || i >= len(vs.Values) || !isNewError(vs.Values[i]) {
							continue
						}
						sentinels = append(sentinels, f.Name.Name+"."+id.Name)
					}
				}
			}
		}
	}
	sort.Strings(sentinels)
	require.NotEmpty(t, sentinels)
	require.True(t, slices.Contains(sentinels, "recovery.ErrKeyInUse"), "the parse finds the engine's sentinels: %v", sentinels)
	return sentinels
}

func isNewError(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && ((pkg.Name == "errors" && sel.Sel.Name == "New") || (pkg.Name == "fmt" && sel.Sel.Name == "Errorf"))
}
