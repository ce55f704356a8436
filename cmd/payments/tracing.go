package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/example/payments/internal/telemetry"
)

// flushTimeout bounds how long a process spends, as it exits, exporting
// the spans still buffered.
const flushTimeout = 5 * time.Second

// flushBeforeCrash exports the spans that ended before a failpoint crashes
// the process on purpose, so that the crashed request's trace shows its
// work up to the crash (failpoint.Set.BeforeCrash).
func flushBeforeCrash() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = telemetry.Flush(ctx)
}

// startTracing sets tracing up from OpenTelemetry's environment variables
// (internal/telemetry: on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set) before any part is built, and
// returns what flushes the spans as the process exits. A setting it cannot
// honour stops the process at start-up. Its spans' service.name is
// "payments-<command>" (payments-serve, payments-worker), unless
// OTEL_SERVICE_NAME says otherwise.
func startTracing(ctx context.Context, command string, log *slog.Logger) (flush func(), err error) {
	shutdown, err := telemetry.Setup(ctx, "payments-"+command)
	if errors.Is(err, telemetry.ErrSettings) {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("setting up tracing: %w", err)
	}
	if telemetry.Enabled() {
		log.Info("tracing on: spans are exported over OTLP (OTEL_EXPORTER_OTLP_* settings)")
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("exporting the last spans failed", slog.String("error", err.Error()))
		}
	}, nil
}
