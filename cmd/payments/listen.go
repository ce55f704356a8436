package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/example/payments/client"
	"github.com/example/payments/internal/users"
)

// runListen is `payments listen`, like `stripe listen`: it receives a user's
// webhooks on this machine while they develop. It starts a local receiver,
// registers a webhook endpoint pointing at it, prints each delivery it gets
// (and whether its signature verifies with the endpoint's secret), forwards
// it to --forward-to if given, and deletes the endpoint when it stops.
//
// The service must be able to connect to the receiver: `payments dev` allows
// loopback URLs; `payments serve` only with PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true.
func runListen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var opts struct {
		API, APIKey, Events, ForwardTo, Addr string
	}
	f := newFlags("listen", stderr)
	f.stringVar(&opts.API, "api", "PAYMENTS_API_URL", "http://127.0.0.1:8080", "the payments API to register the endpoint with")
	f.stringVar(&opts.APIKey, "api-key", "PAYMENTS_API_KEY", users.DemoUsers[0].APIKey, "whose webhooks to receive (default: alice's dev key)")
	f.stringVar(&opts.Events, "events", "PAYMENTS_LISTEN_EVENTS", "*", `the event types to receive, comma-separated ("payment.succeeded,refund.*")`)
	f.stringVar(&opts.ForwardTo, "forward-to", "PAYMENTS_LISTEN_FORWARD_TO", "", "a local URL each delivery is POSTed to, unchanged")
	f.stringVar(&opts.Addr, "addr", "PAYMENTS_LISTEN_ADDR", "127.0.0.1:0", "where the local receiver listens")
	if err := f.parse(args); err != nil {
		return err
	}
	if opts.APIKey == "" { // PAYMENTS_API_KEY= set but empty
		opts.APIKey = users.DemoUsers[0].APIKey
	}
	log := newLogger(stderr, slog.LevelInfo)

	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	receiverURL := "http://" + dialableAddr(ln.Addr()) + "/"
	api := &apiClient{base: strings.TrimSuffix(opts.API, "/"), key: opts.APIKey,
		http: &http.Client{Timeout: 10 * time.Second}, log: log, progress: stderr}
	endpoint, err := api.createEndpoint(ctx, receiverURL, strings.Split(opts.Events, ","))
	if err != nil {
		return fmt.Errorf("registering a webhook endpoint with %s: %w", opts.API, err)
	}
	recv, err := newReceiver(endpoint.Secret, opts.ForwardTo, stdout, log)
	if err != nil {
		return errors.Join(err, api.deleteEndpoint(endpoint.ID))
	}
	fmt.Fprintf(stdout, "Ready: webhook endpoint %s (signing secret %s) receives events at %s\n", endpoint.ID, endpoint.Secret, receiverURL)
	if opts.ForwardTo != "" {
		fmt.Fprintf(stdout, "Forwarding each delivery to %s\n", opts.ForwardTo)
	}
	fmt.Fprintf(stdout, "Press Ctrl-C to stop and delete the endpoint.\n")

	srv := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		err = nil
	case err = <-served:
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)

	if delErr := api.deleteEndpoint(endpoint.ID); delErr != nil {
		return errors.Join(err, fmt.Errorf("deleting webhook endpoint %s: %w (delete it with DELETE /v1/webhook_endpoints/%s)",
			endpoint.ID, delErr, endpoint.ID))
	}
	fmt.Fprintf(stdout, "Deleted webhook endpoint %s\n", endpoint.ID)
	return err
}

// dialableAddr is the receiver's address as the service should dial it:
// listening on every interface (0.0.0.0, ::) is reached through loopback.
func dialableAddr(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
}

// receiver is the local endpoint: it verifies, prints and forwards each
// delivery.
type receiver struct {
	webhook   *standardwebhooks.Webhook
	forwardTo string
	forward   *http.Client
	log       *slog.Logger
	now       func() time.Time

	mu  sync.Mutex // deliveries arrive concurrently; each line is printed whole
	out io.Writer
}

// maxDeliveryBytes is far above any Event object (the API caps request
// bodies at 64 KiB, and events hold one payment or refund).
const maxDeliveryBytes = 1 << 20

func newReceiver(secret, forwardTo string, out io.Writer, log *slog.Logger) (*receiver, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("the endpoint's secret %q is not whsec_ and base64: %w", secret, err)
	}
	return &receiver{
		webhook:   wh,
		forwardTo: forwardTo,
		// The forward goes to the developer's own machine: none of
		// safehttp's rules apply, and a redirect from their app is
		// theirs to make.
		forward: &http.Client{Timeout: 10 * time.Second},
		log:     log,
		now:     time.Now,
		out:     out,
	}, nil
}

// ServeHTTP prints `<time> <event type> <event id> signature <ok|INVALID>`,
// followed by ` -> forwarded <status>` when forwarding. It answers 200, or
// the forward's status (502 when the forward fails), so that the service
// records what the developer's app answered and retries what it refused.
// A delivery that does not verify is still forwarded: the app's own check
// is what the developer is testing.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "webhook deliveries are POSTs", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxDeliveryBytes))
	if err != nil {
		r.log.Warn("reading a delivery", slog.Any("error", err))
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	signature := "ok"
	if err := r.webhook.Verify(body, req.Header); err != nil {
		signature = "INVALID"
		r.log.Warn("delivery signature does not verify", slog.String("webhook_id", req.Header.Get("webhook-id")), slog.Any("error", err))
	}
	var event struct{ ID, Type string }
	if json.Unmarshal(body, &event) != nil || event.ID == "" {
		event.ID = req.Header.Get("webhook-id")
	}
	if event.Type == "" {
		event.Type = "(no type)"
	}
	line := fmt.Sprintf("%s %s %s signature %s", r.now().Format(time.RFC3339), event.Type, event.ID, signature)

	status := http.StatusOK
	if r.forwardTo != "" {
		forwarded, err := r.forwardDelivery(req, body)
		if err != nil {
			status = http.StatusBadGateway
			line += " -> forward failed: " + err.Error()
		} else {
			status = forwarded
			line += " -> forwarded " + strconv.Itoa(forwarded)
		}
	}
	r.println(line)
	w.WriteHeader(status)
}

// forwardDelivery POSTs the body and the headers a receiver verifies with,
// byte for byte, and returns the answer's status.
func (r *receiver) forwardDelivery(delivery *http.Request, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(delivery.Context(), http.MethodPost, r.forwardTo, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	for name, values := range delivery.Header {
		if strings.HasPrefix(strings.ToLower(name), "webhook-") || name == "Content-Type" {
			req.Header[name] = values
		}
	}
	resp, err := r.forward.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDeliveryBytes)) // lets the connection be reused
	return resp.StatusCode, nil
}

func (r *receiver) println(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintln(r.out, line)
}

// apiClient is the little of the payments API that listen needs.
type apiClient struct {
	base, key string
	http      *http.Client
	log       *slog.Logger
	// progress, when set, gets a line in words for each try that failed
	// and will be made again.
	progress io.Writer
	// unreachableFor is how long registration tries while nothing answers
	// at base at all; 0 means unreachableDeadline.
	unreachableFor time.Duration
}

type webhookEndpoint struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// registrationDeadline bounds the retries of the registration: long enough
// for `payments dev` started at the same moment to come up.
const registrationDeadline = time.Minute

// unreachableDeadline bounds them while nothing answers at the API's
// address at all: a `payments dev` starting at the same moment listens
// within seconds (before its database is up); a wrong --api never does.
const unreachableDeadline = 15 * time.Second

// createEndpoint registers url through the service's Go client, which
// retries network errors, 409, 429 and 5xx with the one Idempotency-Key it
// makes for the call: however many tries it takes, the API creates one
// endpoint, and a retry after a lost answer gets that endpoint's answer
// again, secret included.
func (c *apiClient) createEndpoint(ctx context.Context, url string, events []string) (*webhookEndpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, registrationDeadline)
	defer cancel()
	unreachableFor := c.unreachableFor
	if unreachableFor <= 0 {
		unreachableFor = unreachableDeadline
	}
	var unreachableSince time.Time // of the current run of tries nothing answered
	gaveUp := false
	api := client.New(c.base, c.key, client.WithHTTPClient(c.http),
		// Bounded by registrationDeadline rather than by a count.
		client.WithMaxAttempts(math.MaxInt), client.WithBackoff(100*time.Millisecond, 5*time.Second),
		client.WithObserver(func(a client.Attempt) {
			if !a.Retry {
				return
			}
			if a.Status != 0 {
				unreachableSince = time.Time{}
				c.say("the API at %s answered %d; trying again in %s", c.base, a.Status, a.Wait.Round(time.Millisecond))
				return
			}
			if unreachableSince.IsZero() {
				unreachableSince = time.Now()
			}
			if time.Since(unreachableSince)+a.Wait > unreachableFor {
				gaveUp = true
				cancel()
				return
			}
			c.say("cannot reach %s (%v); trying again in %s", c.base, a.Err, a.Wait.Round(time.Millisecond))
		}))
	e, err := api.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointParams{
		URL: url, EnabledEvents: events, Description: client.String("payments listen"),
	})
	var answer *client.Error
	switch {
	case gaveUp:
		return nil, fmt.Errorf("nothing answers at %s (tried for %s): is payments dev or payments serve running there? "+
			"Give its address with --api (or PAYMENTS_API_URL)", c.base, unreachableFor)
	case errors.As(err, &answer) && answer.Status == http.StatusBadRequest && strings.Contains(answer.Detail, "url is refused"):
		return nil, fmt.Errorf("%w\nThe service does not deliver webhooks to this machine's address %s: payments serve delivers only to "+
			"public addresses unless it runs with PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true (payments dev does by default)", err, url)
	case err != nil:
		return nil, err
	}
	if e.ID == "" || e.Secret == "" {
		return nil, fmt.Errorf("the API answered 201 without an endpoint id and secret")
	}
	return &webhookEndpoint{ID: e.ID, URL: e.URL, Secret: e.Secret}, nil
}

// say prints a progress line, in words, when progress is set.
func (c *apiClient) say(format string, args ...any) {
	if c.progress != nil {
		fmt.Fprintf(c.progress, "payments listen: "+format+"\n", args...)
	}
}

// deleteEndpoint deletes the endpoint, also after the command's context is
// cancelled: it is how listen cleans up on Ctrl-C. An endpoint already gone
// is fine.
func (c *apiClient) deleteEndpoint(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.New(c.base, c.key, client.WithHTTPClient(c.http)).DeleteWebhookEndpoint(ctx, id)
	var answer *client.Error
	if errors.As(err, &answer) && answer.Status == http.StatusNotFound {
		return nil
	}
	return err
}
