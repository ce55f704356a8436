package stripeclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/form"
)

// sizedBackend is the stripe.Backend every call goes through: stripe-go's
// own BackendImplementation (its headers, its error types, its multipart
// and streaming calls) except for how Call and CallRaw send a request's
// body and decode the answer, where stripe-go v76 wastes what a new
// payment's one call pays for at every request (issue 40):
//
//   - stripe-go hands net/http the form body behind a reader of its own
//     and without its length, so every POST went out chunked, in three
//     writes (the headers, flushed first because net/http cannot tell the
//     body is in memory; the chunk; the chunk's end) that the other side
//     reads in as many pieces. Here the body has its Content-Length and
//     goes out with the headers in one write.
//   - stripe-go decodes an answer three times over: json.Unmarshal of its
//     response wrapper (one pass to validate, one to find the object's
//     end), the wrapper's UnmarshalJSON calling json.Unmarshal again (two
//     more), then PaymentIntent.UnmarshalJSON, which copies the whole body
//     into a string to see whether it is an id, and calls json.Unmarshal a
//     third time (a last validation, then the decoding). Here a payment
//     intent or a refund is decoded once (decodeOnce), through a type with
//     its fields and without its UnmarshalJSON.
//
// Measured on 2 shared cores, stripe-go's backend and this one run in turn:
// BenchmarkCreatePaymentIntent, client and simulator together, went from a
// median of 175 to 138 µs of CPU per call (five pairs: 170-185 against
// 131-150), 306 to 280 allocations and 26.4 to 23.2 KB; under strace, B at
// 16 clients went from 30.4 to 22.3 reads, writes, epoll waits, futexes and
// sleeps per request (8.0 to 6.0 writes). That is about 2-3 % of B's CPU
// per request: less than cmd/paymentsbench's run-to-run spread there.
// Everything else stays stripe-go's: the
// request's headers (NewRequest), the error an answer >= 400 becomes
// (ResponseToError, so Classify and AsDecline see stripe-go's types), no
// retries (MaxNetworkRetries is 0 here anyway: see the package comment) and
// no telemetry (turned off in New).
type sizedBackend struct {
	*stripe.BackendImplementation
}

// Call is stripe.Backend's Call: the params become a form, as stripe-go's
// own Call does, then CallRaw.
func (b sizedBackend) Call(method, path, key string, params stripe.ParamsContainer, v stripe.LastResponseSetter) error {
	var values *form.Values
	var common *stripe.Params
	// params is an interface holding a typed pointer that may be nil.
	if params != nil && !reflect.ValueOf(params).IsNil() {
		common = params.GetParams()
		values = &form.Values{}
		form.AppendTo(values, params)
	}
	return b.CallRaw(method, path, key, values, common, v)
}

// CallRaw is stripe.Backend's CallRaw (list pages come through it): the
// request sent with its length, the answer decoded once into v.
func (b sizedBackend) CallRaw(method, path, key string, values *form.Values, params *stripe.Params, v stripe.LastResponseSetter) error {
	var body []byte
	if values != nil && !values.Empty() {
		if method == http.MethodGet {
			path += "?" + values.Encode()
		} else {
			body = []byte(values.Encode())
		}
	}
	req, err := b.NewRequest(method, path, key, "application/x-www-form-urlencoded", params)
	if err != nil {
		return err
	}
	if body != nil {
		// A *bytes.Reader behind io.NopCloser is a body net/http knows
		// is in memory: no early flush of the headers. GetBody lets the
		// transport send it again on a new connection (see the package
		// comment: the one resend kept).
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	res, err := b.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	answer, err := readAnswer(res)
	if err != nil {
		return err
	}
	if res.StatusCode >= 400 {
		return b.ResponseToError(res, answer)
	}
	if err := decodeOnce(answer, v); err != nil {
		return fmt.Errorf("stripe: decoding the answer (status %d): %w", res.StatusCode, err)
	}
	v.SetLastResponse(&stripe.APIResponse{
		Header: res.Header, IdempotencyKey: res.Header.Get("Idempotency-Key"), RawJSON: answer,
		RequestID: res.Header.Get("Request-Id"), Status: res.Status, StatusCode: res.StatusCode,
	})
	return nil
}

// maxPresized bounds the buffer readAnswer makes from a Content-Length
// header alone: a larger answer (a page of 100 objects) grows as it
// arrives, so that a wrong header cannot make it allocate gigabytes.
const maxPresized = 1 << 20

// readAnswer reads res's whole body into one buffer of the size its
// Content-Length says (io.ReadAll starts at 512 bytes and grows, copying,
// through a payment intent's couple of KiB), and closes it.
func readAnswer(res *http.Response) ([]byte, error) {
	defer res.Body.Close()
	if n := res.ContentLength; n >= 0 && n <= maxPresized {
		buf := make([]byte, n)
		if _, err := io.ReadFull(res.Body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(res.Body)
}

// paymentIntentFields and refundFields are stripe-go's objects without
// their UnmarshalJSON (a defined type has its own method set), which only
// adds, to the plain decoding of the fields, a check that the value is not
// a bare id (an expandable field's) and another pass of encoding/json.
type (
	paymentIntentFields stripe.PaymentIntent
	refundFields        stripe.Refund
)

// decodeOnce decodes an answer into v: a payment intent or a refund in one
// pass of encoding/json (plus its validation), anything else as stripe-go
// would.
func decodeOnce(answer []byte, v stripe.LastResponseSetter) error {
	switch obj := v.(type) {
	case *stripe.PaymentIntent:
		return json.Unmarshal(answer, (*paymentIntentFields)(obj))
	case *stripe.Refund:
		return json.Unmarshal(answer, (*refundFields)(obj))
	default:
		return json.Unmarshal(answer, v)
	}
}
