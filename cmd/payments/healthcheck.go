package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealthcheck is `payments healthcheck --url U`: exits 0 when U answers
// 200 within the timeout. Container images without curl use it for their
// health checks.
func runHealthcheck(ctx context.Context, args []string, stderr io.Writer) error {
	var url string
	var timeout time.Duration
	f := newFlags("healthcheck", stderr)
	f.StringVar(&url, "url", "http://127.0.0.1:8080/healthz", "the URL that must answer 200 (/healthz: the process is up; /readyz: it can commit, of serve or of worker on its --metrics-addr)")
	f.DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	if err := f.parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
