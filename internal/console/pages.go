package console

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/events"
	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/merchanthooks"
	"github.com/example/payments/internal/recovery"
)

var queries = dbsqlc.New()

// pageSize is how many rows a list shows at once.
const pageSize = 50

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	Message string
	// SignIn offers a link to the sign-in form.
	SignIn bool
	// CSRF is the session's CSRF value, for the forms.
	CSRF string
	Data any
	// Failed styles Message as an error (an alert), not as information:
	// set by render for an answer of 400 or more.
	Failed bool
}

var pageNames = []string{"login", "error", "dashboard", "keys", "story", "confirm", "retried",
	"payments", "payment", "endpoints", "endpoint", "receipts"}

var funcs = template.FuncMap{
	"keyPath":     keyPath,
	"age":         fmtAge,
	"nextAttempt": merchanthooks.NextAttempt,
	"time": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04:05.000Z")
		case *time.Time:
			if v == nil {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05.000Z")
		case pgtype.Timestamptz:
			if !v.Valid {
				return "—"
			}
			return v.Time.UTC().Format("2006-01-02 15:04:05.000Z")
		}
		return fmt.Sprint(t)
	},
	"text": func(t pgtype.Text) string {
		if !t.Valid {
			return "—"
		}
		return t.String
	},
	"int4": func(n pgtype.Int4) string {
		if !n.Valid {
			return "—"
		}
		return strconv.Itoa(int(n.Int32))
	},
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"pretty": prettyJSON,
	// shortTime is a time to the second, for a table's column.
	"shortTime":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"money":      formatMoney,
	"pathEscape": url.PathEscape,
	"label":      func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"sub":        func(a int64, b int32) int64 { return a - int64(b) },
}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// render writes the page name with status, in the layout (or only the
// template part, for the live updates).
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Failed = status >= http.StatusBadRequest
	h.renderPart(w, r, status, name, "layout.html", p)
}

func (h *handler) renderPart(w http.ResponseWriter, r *http.Request, status int, name, part string, p page) {
	if s := sessionFrom(r.Context()); s.id != nil {
		p.CSRF = h.csrf(s)
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, part, p); err != nil {
		h.log.ErrorContext(r.Context(), "console: rendering", "page", name, "error", err.Error())
		http.Error(w, "rendering failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// prettyJSON indents a JSON document for reading; what is not JSON comes
// back as it is. html/template escapes either.
func prettyJSON(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

// dashboardData is the dashboard, and its live part.
type dashboardData struct {
	Counts []keyadmin.Count
	// Totals by state, over every flow.
	Unfinished, Locked, NeedingAttention, Finished int64
	// FinishedEstimated: Finished is PostgreSQL's estimate (keyadmin.Admin.Counts).
	FinishedEstimated bool
	Recent            []keyadmin.Summary
	Unprocessable     int64
	At                time.Time
}

func (h *handler) dashboardData(r *http.Request) (dashboardData, error) {
	d := dashboardData{At: h.cfg.Now()}
	counts, err := h.cfg.Keys.Counts(r.Context())
	if err != nil {
		return d, err
	}
	d.Counts = counts
	for _, c := range counts {
		if c.Finished() {
			d.Finished += c.Keys
			d.FinishedEstimated = d.FinishedEstimated || c.Estimated
		} else {
			d.Unfinished += c.Keys
		}
		d.Locked += c.Locked
		d.NeedingAttention += c.NeedingAttention
	}
	if d.Recent, err = h.cfg.Keys.Page(r.Context(), keyadmin.PageParams{State: keyadmin.Unfinished, Limit: 10}); err != nil {
		return d, err
	}
	d.Unprocessable, err = queries.ConsoleCountUnprocessable(r.Context(), h.cfg.Pool)
	return d, err
}

func (h *handler) dashboard(w http.ResponseWriter, r *http.Request) {
	d, err := h.dashboardData(r)
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "dashboard", page{Title: "Keys, live", Nav: "dashboard", Data: d})
}

// live is the dashboard's live part alone, which console.js fetches every
// few seconds and puts in place.
func (h *handler) live(w http.ResponseWriter, r *http.Request) {
	d, err := h.dashboardData(r)
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	h.renderPart(w, r, http.StatusOK, "dashboard", "live", page{Data: d})
}

// keysData is the key list and its filter.
type keysData struct {
	State, User, Flow, MinAge string
	States                    []string
	Keys                      []keyadmin.Summary
	Next                      string // the next page's address, or ""
}

func (h *handler) keys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := keysData{State: q.Get("state"), User: q.Get("user"), Flow: q.Get("flow"), MinAge: q.Get("min_age"),
		States: []string{"", "unfinished", "needs_attention", "locked", "finished"}}
	p := keyadmin.PageParams{UserEmail: d.User, Flow: d.Flow, Limit: pageSize}
	var problems []string
	st, err := keyadmin.ParsePageState(d.State)
	if err != nil {
		problems = append(problems, "state: "+err.Error())
	}
	p.State = st
	if d.MinAge != "" {
		if p.MinAge, err = time.ParseDuration(d.MinAge); err != nil || p.MinAge < 0 {
			problems = append(problems, fmt.Sprintf("min_age %q is not a duration such as 30s or 5m", d.MinAge))
		}
	}
	if before := q.Get("before"); before != "" {
		if p.BeforeCreated, p.BeforeID, err = parseKeyCursor(before); err != nil {
			problems = append(problems, "before: not a cursor of this list")
		}
	}
	if len(problems) > 0 {
		h.render(w, r, http.StatusBadRequest, "keys", page{Title: "Keys", Nav: "keys", Message: strings.Join(problems, "; "), Data: d})
		return
	}
	d.Keys, err = h.cfg.Keys.Page(r.Context(), p)
	if errors.Is(err, keyadmin.ErrUnknownUser) {
		h.render(w, r, http.StatusOK, "keys", page{Title: "Keys", Nav: "keys", Message: "No user has the email " + d.User + ".", Data: d})
		return
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	if len(d.Keys) == pageSize {
		last := d.Keys[len(d.Keys)-1]
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("before", strconv.FormatInt(last.Created.UnixMicro(), 10)+"_"+last.ID.String())
		d.Next = Prefix + "/keys?" + next.Encode()
	}
	h.render(w, r, http.StatusOK, "keys", page{Title: "Keys", Nav: "keys", Data: d})
}

func parseKeyCursor(s string) (time.Time, uuid.UUID, error) {
	micros, id, ok := strings.Cut(s, "_")
	n, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil {
		return time.Time{}, uuid.UUID{}, errors.New("bad cursor")
	}
	u, err := uuid.Parse(id)
	return time.UnixMicro(n), u, err
}

// storyData is a key's story.
type storyData struct {
	*keyadmin.Story
	// TraceURL links to the key's trace, when a trace UI is configured and
	// the key was traced.
	TraceURL string
	// Points are the recovery points of the key's flow, as the flow
	// declares them, each with where the key stands against it.
	Points []pointState
}

// pointState is one recovery point of a key's flow: Passed (the key has
// gone beyond it, or it was skipped on the way: a flow may move past a
// point, as a declined payment goes from payment_created to finished),
// Here (the key stands at it), or neither (ahead).
type pointState struct {
	Name         string
	Passed, Here bool
}

// flowPoints places the key's recovery point among its flow's.
func flowPoints(declared []string, at string) []pointState {
	out := make([]pointState, 0, len(declared))
	passed := true
	for _, p := range declared {
		here := p == at
		if here {
			passed = false
		}
		out = append(out, pointState{Name: p, Passed: passed && !here, Here: here})
	}
	return out
}

func (h *handler) story(w http.ResponseWriter, r *http.Request) {
	email, ok1 := param(r, "user")
	key, ok2 := param(r, "key")
	if !ok1 || !ok2 {
		h.notFound(w, r, "No such key.")
		return
	}
	s, err := h.cfg.Keys.Show(r.Context(), email, key)
	if errors.Is(err, keyadmin.ErrUnknownUser) || errors.Is(err, keyadmin.ErrUnknownKey) {
		h.notFound(w, r, err.Error())
		return
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	d := storyData{Story: s, Points: flowPoints(h.cfg.Keys.Points(s.Flow), s.RecoveryPoint)}
	if h.cfg.TraceURL != "" && s.TraceID != "" {
		d.TraceURL = strings.ReplaceAll(h.cfg.TraceURL, "{trace_id}", s.TraceID)
	}
	h.render(w, r, http.StatusOK, "story", page{Title: "Key " + key, Nav: "keys", Data: d})
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request, msg string) {
	h.render(w, r, http.StatusNotFound, "error", page{Title: "Not found", Message: msg})
}

// retryData is a re-drive's confirmation or outcome.
type retryData struct {
	User, Key string
	Story     *keyadmin.Story
	Done      bool
	Status    int
	Body      string
}

// retry re-drives a key, as `payments keys retry`, once the operator has
// confirmed: a POST without confirm=yes answers the confirmation.
func (h *handler) retry(w http.ResponseWriter, r *http.Request) {
	email, ok1 := param(r, "user")
	key, ok2 := param(r, "key")
	if !ok1 || !ok2 {
		h.notFound(w, r, "No such key.")
		return
	}
	d := retryData{User: email, Key: key}
	if r.PostForm.Get("confirm") != "yes" {
		s, err := h.cfg.Keys.Show(r.Context(), email, key)
		if errors.Is(err, keyadmin.ErrUnknownUser) || errors.Is(err, keyadmin.ErrUnknownKey) {
			h.notFound(w, r, err.Error())
			return
		}
		if err != nil {
			h.serverError(w, r, err)
			return
		}
		d.Story = s
		if s.Locked {
			// Refused as the re-drive itself would be (keyadmin.ErrInUse):
			// the process that holds the key is executing it.
			h.render(w, r, http.StatusConflict, "retried", page{Title: "Re-drive " + key, Nav: "keys",
				Message: lockedReason(s), Data: d})
			return
		}
		h.render(w, r, http.StatusOK, "confirm", page{Title: "Re-drive " + key + "?", Nav: "keys", Data: d})
		return
	}
	resp, err := h.cfg.Keys.Retry(r.Context(), email, key)
	status, msg := http.StatusOK, ""
	switch {
	case errors.Is(err, keyadmin.ErrUnknownUser) || errors.Is(err, keyadmin.ErrUnknownKey):
		h.notFound(w, r, err.Error())
		return
	case errors.Is(err, recovery.ErrNeedsAttention):
		status, msg = http.StatusConflict, "It still needs attention: it is past Stripe's idempotency window and Stripe has no trace of its call. "+
			"Find out at Stripe what happened before re-driving it again."
	case errors.Is(err, keyadmin.ErrAlreadyFinished), errors.Is(err, keyadmin.ErrInUse):
		status, msg = http.StatusConflict, err.Error()
	case recovery.IsTransient(err):
		status, msg = http.StatusServiceUnavailable, "It is not finished: "+err.Error()+". It stays at its recovery point: re-drive it again later, or let the completer."
	case err != nil:
		status, msg = http.StatusInternalServerError, "It is not finished: "+err.Error()+". It stays at its recovery point."
	default:
		d.Done, d.Status, d.Body = true, resp.Status, prettyJSON(resp.Body)
		msg = "It is finished: its answer is stored and replayed to every retry."
	}
	h.render(w, r, status, "retried", page{Title: "Re-drive " + key, Nav: "keys", Message: msg, Data: d})
}

// lockedReason says why a locked key cannot be re-driven now.
func lockedReason(s *keyadmin.Story) string {
	until := "its lock lapses"
	if s.LockExpiresAt != nil {
		until = s.LockExpiresAt.UTC().Format("2006-01-02 15:04:05Z")
	}
	if s.LockOverdue {
		return "It is locked until " + until + " by a process that has not renewed its lock and may have died: " +
			"nothing can take the key over before then. Re-drive it after that, or let the completer."
	}
	return "It is being executed right now (locked until " + until + " while its process renews the lock): " +
		"re-drive it once that has finished, or after then if the process dies."
}

// paymentsData is the payment list.
type paymentsData struct {
	User     string
	Payments []dbsqlc.ConsoleListPaymentsRow
	Next     string
}

func (h *handler) userFilter(r *http.Request, email string) (pgtype.Int8, bool, error) {
	if email == "" {
		return pgtype.Int8{}, true, nil
	}
	id, err := queries.GetUserIDByEmail(r.Context(), h.cfg.Pool, email)
	if errors.Is(err, pgx.ErrNoRows) {
		return pgtype.Int8{}, false, nil
	}
	return pgtype.Int8{Int64: id, Valid: err == nil}, err == nil, err
}

func (h *handler) payments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := paymentsData{User: q.Get("user")}
	user, known, err := h.userFilter(r, d.User)
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	if !known {
		h.render(w, r, http.StatusOK, "payments", page{Title: "Payments", Nav: "payments", Message: "No user has the email " + d.User + ".", Data: d})
		return
	}
	beforeCreated, beforeID := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "\U0010FFFF"
	if before := q.Get("before"); before != "" {
		micros, id, _ := strings.Cut(before, "_")
		n, err := strconv.ParseInt(micros, 10, 64)
		if err != nil {
			h.render(w, r, http.StatusBadRequest, "payments", page{Title: "Payments", Nav: "payments", Message: "before: not a cursor of this list", Data: d})
			return
		}
		beforeCreated, beforeID = time.UnixMicro(n), id
	}
	d.Payments, err = queries.ConsoleListPayments(r.Context(), h.cfg.Pool, dbsqlc.ConsoleListPaymentsParams{
		UserID: user, BeforeCreated: beforeCreated, BeforeID: beforeID, RowLimit: pageSize,
	})
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	if len(d.Payments) == pageSize {
		last := d.Payments[len(d.Payments)-1]
		next := url.Values{"before": {strconv.FormatInt(last.CreatedAt.UnixMicro(), 10) + "_" + last.ID}}
		if d.User != "" {
			next.Set("user", d.User)
		}
		d.Next = Prefix + "/payments?" + next.Encode()
	}
	h.render(w, r, http.StatusOK, "payments", page{Title: "Payments", Nav: "payments", Data: d})
}

// paymentData is a payment with what surrounds it.
type paymentData struct {
	Payment dbsqlc.ConsoleGetPaymentRow
	// Dispute and DuplicateCharges are the payment's, decoded: Stripe's
	// chargeback, and the PaymentIntents Stripe made for it beyond the
	// recorded one, each refunded by the service (docs/API.md section 2).
	Dispute          *consoleDispute
	DuplicateCharges []consoleDuplicateCharge
	Refunds          []dbsqlc.Refund
	Events           []dbsqlc.Event
	Receipts         []dbsqlc.Receipt
	Unprocessable    []dbsqlc.ConsoleListUnprocessableForIntentRow
}

// consoleDispute is a payment's dispute as the API shows it.
type consoleDispute struct {
	ID, Status, Reason string
	Amount, Created    int64
}

// consoleDuplicateCharge is an entry of a payment's duplicate_charges.
type consoleDuplicateCharge struct {
	StripePaymentIntent string `json:"stripe_payment_intent"`
	Amount              int64
	Status              string
}

func (h *handler) payment(w http.ResponseWriter, r *http.Request) {
	id, ok := param(r, "id")
	if !ok {
		h.notFound(w, r, "No such payment.")
		return
	}
	ctx := r.Context()
	var d paymentData
	var err error
	d.Payment, err = queries.ConsoleGetPayment(ctx, h.cfg.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		h.notFound(w, r, "No payment "+id+".")
		return
	}
	if err == nil && d.Payment.Dispute != nil {
		err = json.Unmarshal(d.Payment.Dispute, &d.Dispute)
	}
	if err == nil && d.Payment.DuplicateCharges != nil {
		err = json.Unmarshal(d.Payment.DuplicateCharges, &d.DuplicateCharges)
	}
	if err == nil {
		d.Refunds, err = queries.ConsoleListRefundsOfPayment(ctx, h.cfg.Pool, id)
	}
	if err == nil {
		d.Events, err = queries.ConsoleListEventsOfPayment(ctx, h.cfg.Pool, dbsqlc.ConsoleListEventsOfPaymentParams{UserID: d.Payment.UserID, PaymentID: id})
	}
	if err == nil {
		d.Receipts, err = queries.ConsoleListReceiptsOfPayment(ctx, h.cfg.Pool, id)
	}
	if err == nil {
		d.Unprocessable, err = queries.ConsoleListUnprocessableForIntent(ctx, h.cfg.Pool, d.Payment.StripePaymentIntent.String)
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "payment", page{Title: "Payment " + id, Nav: "payments", Data: d})
}

type endpointsData struct {
	User      string
	Endpoints []dbsqlc.ConsoleListEndpointsRow
}

func (h *handler) endpoints(w http.ResponseWriter, r *http.Request) {
	d := endpointsData{User: r.URL.Query().Get("user")}
	user, known, err := h.userFilter(r, d.User)
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	if !known {
		h.render(w, r, http.StatusOK, "endpoints", page{Title: "Webhook endpoints", Nav: "endpoints", Message: "No user has the email " + d.User + ".", Data: d})
		return
	}
	d.Endpoints, err = queries.ConsoleListEndpoints(r.Context(), h.cfg.Pool, dbsqlc.ConsoleListEndpointsParams{UserID: user, RowLimit: 200})
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "endpoints", page{Title: "Webhook endpoints", Nav: "endpoints", Data: d})
}

type endpointData struct {
	Endpoint   dbsqlc.ConsoleGetEndpointRow
	Deliveries []dbsqlc.ConsoleListDeliveriesOfEndpointRow
	// RedeliverKey is the idempotency key of this page's redeliver forms:
	// chosen when the page is shown, so that a form sent twice redelivers
	// once.
	RedeliverKey string
	Redelivered  string
}

// redeliverKeyPrefix opens the idempotency keys of the console's
// redeliveries: the operator's requests are told from the merchant's.
const redeliverKeyPrefix = "console-redeliver-"

func (h *handler) endpoint(w http.ResponseWriter, r *http.Request) {
	id, ok := param(r, "id")
	if !ok {
		h.notFound(w, r, "No such endpoint.")
		return
	}
	var d endpointData
	var err error
	d.Endpoint, err = queries.ConsoleGetEndpoint(r.Context(), h.cfg.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		h.notFound(w, r, "No webhook endpoint "+id+".")
		return
	}
	if err == nil {
		d.Deliveries, err = queries.ConsoleListDeliveriesOfEndpoint(r.Context(), h.cfg.Pool, dbsqlc.ConsoleListDeliveriesOfEndpointParams{EndpointID: id, RowLimit: 200})
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	d.RedeliverKey = redeliverKeyPrefix + hex.EncodeToString(nonce)
	d.Redelivered = r.URL.Query().Get("redelivered")
	h.render(w, r, http.StatusOK, "endpoint", page{Title: "Webhook endpoint " + id, Nav: "endpoints", Data: d})
}

// redeliver redelivers an event of the endpoint's user, through the same
// flow as POST /v1/events/{id}/redeliver (merchanthooks.Service.Redeliver),
// under the form's idempotency key.
func (h *handler) redeliver(w http.ResponseWriter, r *http.Request) {
	id, ok := param(r, "id")
	if !ok {
		h.notFound(w, r, "No such endpoint.")
		return
	}
	ctx := r.Context()
	ep, err := queries.ConsoleGetEndpoint(ctx, h.cfg.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		h.notFound(w, r, "No webhook endpoint "+id+".")
		return
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	eventID, key := r.PostForm.Get("event"), r.PostForm.Get("idempotency_key")
	if !strings.HasPrefix(key, redeliverKeyPrefix) || len(key) != len(redeliverKeyPrefix)+32 {
		h.render(w, r, http.StatusBadRequest, "error", page{Title: "Bad form", Message: "The form has no idempotency key of the console's: reload the page."})
		return
	}
	if _, err := events.Get(ctx, h.cfg.Pool, ep.UserID, eventID); errors.Is(err, events.ErrNotFound) {
		h.notFound(w, r, "The endpoint's user has no event "+eventID+".")
		return
	} else if err != nil {
		h.serverError(w, r, err)
		return
	}
	path := "/v1/events/" + eventID + "/redeliver"
	resp, err := h.cfg.Hooks.Redeliver(ctx, recovery.Request{UserID: ep.UserID, Key: key, Method: http.MethodPost, Path: path, Body: []byte("{}")},
		merchanthooks.RedeliverParams{Event: eventID})
	switch {
	case errors.Is(err, recovery.ErrKeyInUse):
		h.render(w, r, http.StatusConflict, "error", page{Title: "In progress", Message: "This redelivery is running already: reload the endpoint's page."})
		return
	case err != nil:
		h.render(w, r, http.StatusServiceUnavailable, "error", page{Title: "Not redelivered yet",
			Message: "The redelivery did not finish: " + err.Error() + ". Send the form again (it is idempotent)."})
		return
	case resp.Status >= 300:
		h.render(w, r, http.StatusConflict, "error", page{Title: "Not redelivered", Message: fmt.Sprintf("The redelivery answered %d: %s", resp.Status, resp.Body)})
		return
	}
	http.Redirect(w, r, Prefix+"/webhook_endpoints/"+url.PathEscape(id)+"?redelivered="+url.QueryEscape(eventID), http.StatusSeeOther)
}

type receiptsData struct {
	Receipts      []dbsqlc.ConsoleListReceiptsRow
	Sent, Pending int
}

func (h *handler) receipts(w http.ResponseWriter, r *http.Request) {
	rows, err := queries.ConsoleListReceipts(r.Context(), h.cfg.Pool, 200)
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	d := receiptsData{Receipts: rows}
	for _, x := range rows {
		if x.SentAt.Valid {
			d.Sent++
		} else {
			d.Pending++
		}
	}
	h.render(w, r, http.StatusOK, "receipts", page{Title: "Receipts", Nav: "receipts", Data: d})
}
