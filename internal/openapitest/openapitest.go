// Package openapitest holds the service to its OpenAPI document in tests:
// every request a test sends and every response the service gives are
// checked against the document served at GET /openapi.json (internal/api's
// openapi.json), with pb33f/libopenapi-validator, a maintained validator of
// OpenAPI 3.1. A mismatch fails the test that caused it.
//
// Wrap a test server's handler with Handler, or a test client's transport
// with Transport. The rules, per exchange:
//
//   - The response must be one the document gives for its route: a status
//     the operation lists, with its media type, a body of its schema and
//     the headers it requires. Always, whatever the request was.
//   - A request the document allows is what the service must take, and a
//     request the document forbids (an unknown field, a missing key, a route
//     that is not in it) is what the service must refuse: such a request
//     must get a 4xx. Tests that send hostile input on purpose therefore
//     need no marking: the service refuses it, and its answer is still
//     checked. A forbidden request the service accepted (2xx or 3xx), or
//     answered with a 5xx, fails the test: the document and the code
//     disagree about what the API takes.
//   - A request to a route the document does not list must be refused with
//     a problem+json (404, 405, or 401 before authentication): a route the
//     service serves and the document lacks fails the first test to call it.
//
// This package is for tests only; nothing in the service imports it.
package openapitest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/example/payments/internal/api"
)

// Document is the service's OpenAPI document, parsed, with a validator.
type Document struct {
	model     *v3.Document
	validator validator.Validator
	options   *config.ValidationOptions
	problem   *base.Schema
	// mu serialises validations: the validator's caches are built lazily.
	mu sync.Mutex
}

// Load parses and validates the service's document: it is an error if the
// document is not valid OpenAPI 3.1.
func Load() (*Document, error) { return loadOnce() }

var loadOnce = sync.OnceValues(func() (*Document, error) { return Parse(api.OpenAPIDocument()) })

// Parse parses an OpenAPI document and checks it against the OpenAPI
// specification's own schema.
func Parse(spec []byte) (*Document, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document: %w", err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1") {
		return nil, fmt.Errorf("the OpenAPI document is version %q, not 3.1", v)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("building the OpenAPI model: %w", err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		return nil, fmt.Errorf("building the validator: %w", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %s", describe(verrs))
	}
	d := &Document{model: &model.Model, validator: v, options: config.NewValidationOptions()}
	if proxy := model.Model.Components.Schemas.GetOrZero("Problem"); proxy != nil {
		d.problem = proxy.Schema()
	}
	if d.problem == nil {
		return nil, errors.New("the OpenAPI document has no components.schemas.Problem")
	}
	return d, nil
}

// Check validates one exchange under the rules of the package comment. req
// and resp carry their bodies as reqBody and respBody (their Body fields
// are not read). It returns nil when the exchange conforms.
func (d *Document) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	req = withBody(req, reqBody)
	resp = withResponseBody(resp, req, respBody)
	where := fmt.Sprintf("%s %s -> %d", req.Method, req.URL.RequestURI(), resp.StatusCode)

	pathItem, routeErrs, path := paths.FindPath(req, d.model, d.options)
	if pathItem == nil || len(routeErrs) > 0 || pathItem.GetOperations().GetOrZero(strings.ToLower(req.Method)) == nil {
		// Not a route of the document: the service must refuse it, as a problem.
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			return fmt.Errorf("openapi: %s: the route is not in the document, yet the service answered %d", where, resp.StatusCode)
		}
		if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(d.problem, respBody); !ok {
			return fmt.Errorf("openapi: %s: the answer to a route not in the document is not a Problem: %s", where, describe(errs))
		}
		return nil
	}

	if ok, errs := d.validator.GetResponseBodyValidator().ValidateResponseBodyWithPathItem(req, resp, pathItem, path); !ok {
		return fmt.Errorf("openapi: %s: the response does not conform to the document: %s\nbody: %s", where, describe(errs), clip(respBody))
	}
	req = withBody(req, reqBody)
	if ok, errs := d.validator.ValidateHttpRequestSyncWithPathItem(req, pathItem, path); !ok {
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			return fmt.Errorf("openapi: %s: the document forbids this request, yet the service answered %d: %s", where, resp.StatusCode, describe(errs))
		}
	}
	return nil
}

// withBody is req with body as a body that can be read once more.
func withBody(req *http.Request, body []byte) *http.Request {
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return r
}

func withResponseBody(resp *http.Response, req *http.Request, body []byte) *http.Response {
	r := *resp
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.Request = req
	return &r
}

// describe words the validator's errors, one per line.
func describe(errs []*liberrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  - %s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s (at %s)", s.Reason, s.FieldPath)
		}
	}
	return b.String()
}

func clip(b []byte) string {
	const max = 2000
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// Operations lists the document's operations as "METHOD /path", the path as
// the document writes it ("GET /v1/payments/{id}"), sorted.
func (d *Document) Operations() []string {
	var ops []string
	for path, item := range d.model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}
