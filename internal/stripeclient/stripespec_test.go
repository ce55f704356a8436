package stripeclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// stripeSpec is Stripe's own OpenAPI document for API version 2023-10-16,
// the one stripe-go v76 speaks: the spec3.json that stripe-mock
// stripeMockVersion embeds (embedded/openapi/spec3.json), taken from the
// module the Go module proxy serves, as buildStripeMock's go install takes
// it. It is OpenAPI 3.0: "nullable" marks the fields Stripe may send as
// null, a field not listed as required may be left out, an expandable field
// is an anyOf of its id and the object. kin-openapi's validator reads it so.
type stripeSpec struct {
	doc    *openapi3.T
	routes []specRoute
	// mu serialises validations: the validator may fill caches in the
	// document's schemas (compiled patterns) as it goes.
	mu sync.Mutex
}

// specRoute is one path of the document, split into its segments; a
// segment "{...}" matches any one segment.
type specRoute struct {
	template string
	segments []string
	item     *openapi3.PathItem
}

var loadStripeSpec = sync.OnceValues(func() (*stripeSpec, error) {
	path, err := stripeSpecFile()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	if doc.Info == nil || doc.Info.Version != "2023-10-16" {
		return nil, fmt.Errorf("%s is not Stripe's document for API version 2023-10-16", path)
	}
	spec := &stripeSpec{doc: doc}
	for template, item := range doc.Paths.Map() {
		spec.routes = append(spec.routes, specRoute{template, strings.Split(template, "/"), item})
	}
	return spec, nil
})

// stripeSpecFile is the path of spec3.json in the module cache, downloading
// stripe-mock's module first if it is not there.
func stripeSpecFile() (string, error) {
	tmp, err := os.MkdirTemp("", "stripe-spec-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/stripe/stripe-mock@"+stripeMockVersion)
	cmd.Dir = tmp // outside this module: its go.mod must not influence the download
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	var module struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &module); jsonErr != nil || module.Error != "" || module.Dir == "" {
		return "", fmt.Errorf("go mod download github.com/stripe/stripe-mock@%s: %v %s %s",
			stripeMockVersion, err, module.Error, out)
	}
	return filepath.Join(module.Dir, "embedded", "openapi", "spec3.json"), nil
}

// route finds the operation of method and path (a concrete path such as
// /v1/payment_intents/pi_123/capture). A path with fewer parameters wins,
// so /v1/payment_intents/search is search, not the payment intent "search".
func (s *stripeSpec) route(method, path string) (*routers.Route, error) {
	segments := strings.Split(path, "/")
	var best *specRoute
	bestParams := 0
	for i := range s.routes {
		r := &s.routes[i]
		params, ok := r.match(segments)
		if ok && r.item.GetOperation(method) != nil && (best == nil || params < bestParams) {
			best, bestParams = r, params
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%s %s is no operation of Stripe's API", method, path)
	}
	return &routers.Route{Spec: s.doc, Path: best.template, PathItem: best.item,
		Method: method, Operation: best.item.GetOperation(method)}, nil
}

func (r *specRoute) match(segments []string) (params int, ok bool) {
	if len(segments) != len(r.segments) {
		return 0, false
	}
	for i, seg := range r.segments {
		switch {
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			if segments[i] == "" {
				return 0, false
			}
			params++
		case seg != segments[i]:
			return 0, false
		}
	}
	return params, true
}

// checkAnswer validates one answer against the document: its status must be
// one the operation lists (an error status falls to "default", Stripe's
// error object), and its body must be of that response's schema. It returns
// nil when Stripe's document allows the answer.
func (s *stripeSpec) checkAnswer(method, path string, status int, header http.Header, body []byte) error {
	route, err := s.route(method, path)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: httptest.NewRequest(method, path, nil),
			Route:   route,
		},
		Status:  status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		return fmt.Errorf("%s", schemaErrors(err))
	}
	response := route.Operation.Responses.Status(status)
	if response == nil {
		response = route.Operation.Responses.Default()
	}
	media := response.Value.Content.Get("application/json")
	if media == nil || media.Schema == nil {
		return nil
	}
	return noUndefinedFields(media.Schema.Value, body)
}

// noUndefinedFields is an error naming the fields of body schema does not
// define, if any.
func noUndefinedFields(schema *openapi3.Schema, body []byte) error {
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return err
	}
	if extra := undefinedFields(schema, value, ""); len(extra) > 0 {
		return fmt.Errorf("fields Stripe's document does not define: %s", strings.Join(extra, ", "))
	}
	return nil
}

// checkEvent validates an event the simulator sends to webhooks against
// Stripe's event schema, and the object it carries (data.object) against the
// schema of that object's type ("payment_intent", "charge", "refund", ...):
// the event schema itself leaves data.object open.
func (s *stripeSpec) checkEvent(body []byte) error {
	var ev struct {
		Data struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return err
	}
	var obj struct {
		Object string `json:"object"`
	}
	if err := json.Unmarshal(ev.Data.Object, &obj); err != nil {
		return fmt.Errorf("data.object: %w", err)
	}
	if err := s.checkObject("event", body); err != nil {
		return err
	}
	if err := s.checkObject(obj.Object, ev.Data.Object); err != nil {
		return fmt.Errorf("data.object: %w", err)
	}
	return nil
}

// checkObject validates body against the document's schema of that name.
func (s *stripeSpec) checkObject(schema string, body []byte) error {
	ref, ok := s.doc.Components.Schemas[schema]
	if !ok || ref.Value == nil {
		return fmt.Errorf("Stripe's document has no object %q", schema)
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ref.Value.VisitJSON(value, openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("%s", schemaErrors(err))
	}
	return noUndefinedFields(ref.Value, body)
}

// undefinedFields lists the fields of value, at any depth, that schema does
// not define. Stripe's schemas do not forbid other fields (no
// additionalProperties: false), so the validator lets them by; but Stripe
// sends only the fields its document defines, so a field outside it is one
// the simulator made up (or misspelt). An object schema without properties
// (next_action's use_stripe_sdk, an event's data.object) is open and not
// looked into; of an anyOf, the first branch value matches is followed.
func undefinedFields(schema *openapi3.Schema, value any, at string) []string {
	if schema == nil {
		return nil
	}
	if len(schema.AnyOf) > 0 {
		for _, branch := range schema.AnyOf {
			if branch.Value != nil && branch.Value.VisitJSON(value) == nil {
				return undefinedFields(branch.Value, value, at)
			}
		}
		return nil // matches no branch: the validator reports it
	}
	var found []string
	switch v := value.(type) {
	case map[string]any:
		for key, field := range v {
			where := at + "/" + key
			if prop, ok := schema.Properties[key]; ok {
				found = append(found, undefinedFields(prop.Value, field, where)...)
				continue
			}
			if extra := schema.AdditionalProperties.Schema; extra != nil {
				found = append(found, undefinedFields(extra.Value, field, where)...)
				continue
			}
			if len(schema.Properties) > 0 {
				found = append(found, where)
			}
		}
	case []any:
		if schema.Items != nil {
			for i, item := range v {
				found = append(found, undefinedFields(schema.Items.Value, item, fmt.Sprintf("%s/%d", at, i))...)
			}
		}
	}
	slices.Sort(found)
	return found
}

// schemaErrors words the validator's error as one line per schema error:
// where in the body, and why. kin-openapi's own message repeats the whole
// schema and value, which for Stripe's objects runs to pages; and it says
// only that a value matched no branch of an anyOf, so each branch is
// visited again for its reasons (Stripe writes every nullable object field
// as an anyOf of one branch).
func schemaErrors(err error) string {
	var lines []string
	var walk func(prefix string, err error)
	walk = func(prefix string, err error) {
		var multi openapi3.MultiError
		var schemaErr *openapi3.SchemaError
		var responseErr *openapi3filter.ResponseError
		switch {
		case errors.As(err, &multi):
			for _, e := range multi {
				walk(prefix, e)
			}
		case errors.As(err, &schemaErr):
			at := prefix + "/" + strings.Join(schemaErr.JSONPointer(), "/")
			if len(schemaErr.JSONPointer()) == 0 && prefix != "" {
				at = prefix
			}
			lines = append(lines, fmt.Sprintf("at %s: %s", at, schemaErr.Reason))
			if schemaErr.SchemaField == "anyOf" && schemaErr.Schema != nil {
				for _, branch := range schemaErr.Schema.AnyOf {
					if branch.Value != nil {
						walk(at, branch.Value.VisitJSON(schemaErr.Value, openapi3.MultiErrors()))
					}
				}
			}
		case errors.As(err, &responseErr) && responseErr.Err != nil:
			walk(prefix, responseErr.Err)
		case err != nil:
			lines = append(lines, err.Error())
		}
	}
	walk("", err)
	return strings.Join(lines, "; ")
}
