// Package routetest holds a package's route declarations (package route)
// to what is written about them elsewhere, from that package's own tests:
// the OpenAPI document, the README's route table, the Go client and the
// flows the engine runs. The service calls it for its routes
// (internal/api's TestRoutes_agreeWithTheContract), and a team calls it for
// its own (examples/payouts), so an omission fails the tests the team runs.
//
// What it checks, per route: the document has the path and method; the
// operation answers exactly the route's statuses (its success and its
// errors'); the document's ErrorCode enum holds every code the route
// declares and its EventType enum every event; the request body's schema
// has exactly the JSON fields of the route's Request type, and the success
// answer's schema every field a zero Answer has; the client has the
// route's method; the route's flow is one of Contract.Flows. And over the
// whole list: the document has no operation the list lacks, every event
// type of its enum is emitted by some route, every flow is run by a route
// or said why not (Contract.Unrouted), and the README's table between its
// markers is route.Table of the list. Where a check and a generator would
// do, the table is generated (UPDATE_README=1 writes it): it is prose a
// reader reads, made from the declarations alone; the document is checked,
// not generated, as it carries what a declaration cannot (descriptions,
// schemas), and so is the client, written for its callers.
package routetest

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/route"
)

// Contract is what a list of routes is held to.
type Contract struct {
	// OpenAPI is the OpenAPI 3.1 document, as JSON. Required.
	OpenAPI []byte
	// README is the path of the Markdown file whose route table, between
	// TableBegin and TableEnd, is route.Table of the routes; "" checks no
	// table.
	README string
	// Client is a value of the Go client's type ((*client.Client)(nil)):
	// each route's Client is a method of it. Nil: no route may name a
	// client method, and each must say in NoClient why it has none.
	Client any
	// Flows are the flows the engine runs (app.DeclaredFlows): each
	// route's Flow is one of them, and each of them is a route's Flow or
	// in Unrouted.
	Flows []*recovery.Flow
	// Unrouted names the flows no route runs, each with who runs it.
	Unrouted map[string]string
}

// The markers around the README's route table.
const (
	TableBegin = "<!-- route table: generated from the route declarations by routetest.Check (UPDATE_README=1 writes it) -->\n"
	TableEnd   = "<!-- end of route table -->\n"
)

// Check fails t with every disagreement between routes and c.
func Check(t testing.TB, c Contract, routes ...route.Route) {
	t.Helper()
	if c.README != "" && os.Getenv("UPDATE_README") != "" {
		if err := WriteTable(c.README, routes); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range Problems(c, routes...) {
		t.Error(p)
	}
}

// Problems lists every disagreement between routes and c, nil when none.
func Problems(c Contract, routes ...route.Route) []string {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	var doc document
	if err := json.Unmarshal(c.OpenAPI, &doc.root); err != nil {
		return []string{"the OpenAPI document is not JSON: " + err.Error()}
	}
	codes := doc.enum("ErrorCode")
	eventTypes := doc.enum("EventType")
	emitted := map[string]bool{}
	flows := map[string]bool{}
	declared := map[string]bool{}
	for _, r := range routes {
		if declared[r.String()] {
			fail("%s is declared twice", r)
		}
		declared[r.String()] = true
		op := doc.operation(r.Method, r.Path)
		if op == nil {
			fail("%s: the OpenAPI document has no such operation", r)
		} else {
			problems = append(problems, doc.checkOperation(r, op)...)
		}
		for _, e := range r.Errors {
			if !slices.Contains(codes, string(e.Code)) {
				fail("%s: the code %q is not in the document's ErrorCode enum", r, e.Code)
			}
		}
		for _, e := range r.Events {
			emitted[e] = true
			if !slices.Contains(eventTypes, e) {
				fail("%s: the event type %q is not in the document's EventType enum", r, e)
			}
		}
		problems = append(problems, checkClient(c.Client, r)...)
		if r.Flow != "" {
			flows[r.Flow] = true
			if c.Flows != nil && !slices.ContainsFunc(c.Flows, func(f *recovery.Flow) bool { return f.Name == r.Flow }) {
				fail("%s: its flow %q is not one the engine runs", r, r.Flow)
			}
		}
	}
	for _, op := range doc.operations() {
		if !declared[op] {
			fail("%s: the OpenAPI document has it, and no route declares it", op)
		}
	}
	for _, e := range eventTypes {
		if !emitted[e] {
			fail("the event type %q of the document's EventType enum is emitted by no route", e)
		}
	}
	for _, f := range c.Flows {
		if _, why := c.Unrouted[f.Name]; !flows[f.Name] && !why {
			fail("the flow %q is run by no route, and Contract.Unrouted does not say who runs it", f.Name)
		}
	}
	if c.README != "" {
		if p := checkTable(c.README, routes); p != "" {
			fail("%s", p)
		}
	}
	return problems
}

func checkClient(client any, r route.Route) []string {
	switch {
	case r.Client != "" && r.NoClient != "":
		return []string{fmt.Sprintf("%s: it names a client method (%s) and says it has none (%s)", r, r.Client, r.NoClient)}
	case r.Client == "" && r.NoClient == "":
		return []string{fmt.Sprintf("%s: it names no client method, and does not say why in NoClient", r)}
	case r.Client == "":
		return nil
	case client == nil:
		return []string{fmt.Sprintf("%s: it names the client method %s, and the contract has no client", r, r.Client)}
	}
	if _, ok := reflect.TypeOf(client).MethodByName(r.Client); !ok {
		return []string{fmt.Sprintf("%s: the client %T has no method %s", r, client, r.Client)}
	}
	return nil
}

// checkTable says how the README's table differs from routes', "" when
// it does not.
func checkTable(path string, routes []route.Route) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	_, rest, ok := strings.Cut(string(raw), TableBegin)
	if !ok {
		return path + " has no route table marker: " + strings.TrimSpace(TableBegin)
	}
	got, _, ok := strings.Cut(rest, TableEnd)
	if !ok {
		return path + "'s route table has no end marker"
	}
	if want := route.Table(routes); got != want {
		return fmt.Sprintf("%s's route table differs from the declarations (UPDATE_README=1 writes it):\n%s\nwant:\n%s", path, got, want)
	}
	return ""
}

// WriteTable writes route.Table of routes between the README's markers.
func WriteTable(path string, routes []route.Route) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	before, rest, ok := strings.Cut(string(raw), TableBegin)
	_, after, ok2 := strings.Cut(rest, TableEnd)
	if !ok || !ok2 {
		return fmt.Errorf("%s has no route table markers", path)
	}
	return os.WriteFile(path, []byte(before+TableBegin+route.Table(routes)+TableEnd+after), 0o644)
}

// document is an OpenAPI document, read as plain JSON.
type document struct{ root map[string]any }

// resolve follows a local $ref.
func (d document) resolve(node any) map[string]any {
	m, _ := node.(map[string]any)
	for range 10 {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var at any = d.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			obj, _ := at.(map[string]any)
			at = obj[part]
		}
		m, _ = at.(map[string]any)
	}
	return m
}

func (d document) enum(schema string) []string {
	s := d.resolve(d.at("components", "schemas", schema))
	var values []string
	for _, v := range asSlice(s["enum"]) {
		if str, ok := v.(string); ok {
			values = append(values, str)
		}
	}
	return values
}

func (d document) at(path ...string) any {
	var at any = d.root
	for _, p := range path {
		m, _ := at.(map[string]any)
		at = m[p]
	}
	return at
}

func (d document) operation(method, path string) map[string]any {
	op, _ := d.at("paths", path, strings.ToLower(method)).(map[string]any)
	return op
}

// operations are the document's, as "METHOD /path".
func (d document) operations() []string {
	var ops []string
	paths, _ := d.root["paths"].(map[string]any)
	for path, item := range paths {
		methods, _ := item.(map[string]any)
		for method := range methods {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				ops = append(ops, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(ops)
	return ops
}

func (d document) checkOperation(r route.Route, op map[string]any) []string {
	var problems []string
	responses, _ := op["responses"].(map[string]any)
	var statuses []int
	for s := range responses {
		n, err := strconv.Atoi(s)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: the document answers %q, not a status", r, s))
		}
		statuses = append(statuses, n)
	}
	slices.Sort(statuses)
	want := r.Statuses()
	slices.Sort(want)
	if !slices.Equal(statuses, want) {
		problems = append(problems, fmt.Sprintf("%s: the document answers %v, the declaration %v", r, statuses, want))
	}
	if r.Request != nil {
		content, _ := d.resolve(op["requestBody"])["content"].(map[string]any)
		schema := d.resolve(d.resolve(content["application/json"])["schema"])
		if schema == nil {
			problems = append(problems, fmt.Sprintf("%s: it declares a request body, and the document has no JSON one", r))
		} else if got, want := keys(schema["properties"]), jsonFields(reflect.TypeOf(r.Request)); !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("%s: the request's fields are %v in the document, %v in %T", r, got, want, r.Request))
		}
	} else if op["requestBody"] != nil {
		problems = append(problems, fmt.Sprintf("%s: the document takes a request body, and the declaration none", r))
	}
	if r.Answer != nil {
		problems = append(problems, d.checkAnswer(r, responses)...)
	}
	return problems
}

// checkAnswer holds a zero Answer, as JSON, to the success answer's schema:
// each field it has is a property, and each required property is a field.
func (d document) checkAnswer(r route.Route, responses map[string]any) []string {
	content, _ := d.resolve(responses[strconv.Itoa(r.Status)])["content"].(map[string]any)
	schema := d.resolve(d.resolve(content["application/json"])["schema"])
	raw, err := json.Marshal(r.Answer)
	var fields map[string]any
	if err == nil {
		err = json.Unmarshal(raw, &fields)
	}
	if schema == nil || err != nil {
		return []string{fmt.Sprintf("%s: its answer %T is not a JSON object of the document's (%v)", r, r.Answer, err)}
	}
	var problems []string
	props := keys(schema["properties"])
	for f := range fields {
		if !slices.Contains(props, f) {
			problems = append(problems, fmt.Sprintf("%s: its answer %T has the field %q, which the document does not", r, r.Answer, f))
		}
	}
	for _, req := range asSlice(schema["required"]) {
		if _, ok := fields[req.(string)]; !ok {
			problems = append(problems, fmt.Sprintf("%s: the document requires the answer's field %q, which %T lacks", r, req, r.Answer))
		}
	}
	return problems
}

func keys(node any) []string {
	m, _ := node.(map[string]any)
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func asSlice(node any) []any { s, _ := node.([]any); return s }

// jsonFields are the JSON names of a struct type's fields, sorted; none
// for another type (json.RawMessage: a body the schema leaves free).
func jsonFields(t reflect.Type) []string {
	var names []string
	if t.Kind() != reflect.Struct {
		return nil
	}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
