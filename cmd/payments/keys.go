package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/pglocal"
	"github.com/example/payments/internal/recovery"
)

const keysUsage = "payments keys list|show|retry: give list, show or retry\n" +
	"  payments keys list [--state unfinished|needs_attention|locked] [--user EMAIL] [--limit N] [--json]\n" +
	"  payments keys show --user EMAIL KEY [--json]\n" +
	"  payments keys retry --user EMAIL KEY"

// runKeys is `payments keys list | show | retry`, the operator's commands
// for stuck requests (package keyadmin). The database is DATABASE_URL's, or
// else the cluster of `payments dev` in --data-dir: dev's own server when
// dev is running, else one this command starts and stops again.
func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, keysUsage)
	}
	sub, args := args[0], args[1:]
	var cfg config
	var state, email string
	var limit int
	var asJSON bool
	f := newFlags("keys "+sub, stderr)
	f.stringVar(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL (empty: the cluster in --data-dir)")
	f.stringVar(&cfg.DataDir, "data-dir", "PAYMENTS_DATA_DIR", ".data", "where payments dev keeps its PostgreSQL cluster")
	f.levelVar(&cfg.LogLevel, "log-level", "PAYMENTS_LOG_LEVEL", slog.LevelWarn, "debug, info, warn or error")
	switch sub {
	case "list":
		f.StringVar(&state, "state", string(keyadmin.Unfinished), "unfinished, needs_attention or locked")
		f.StringVar(&email, "user", "", "only this user's keys (email)")
		f.IntVar(&limit, "limit", 100, "at most this many keys")
		f.BoolVar(&asJSON, "json", false, "JSON instead of a table")
	case "show":
		f.StringVar(&email, "user", "", "the key's user (email)")
		f.BoolVar(&asJSON, "json", false, "JSON instead of text")
	case "retry":
		f.StringVar(&email, "user", "", "the key's user (email)")
		// The engine and Stripe exactly as serve has them.
		cfg.stripeFlags(f)
		cfg.engineFlags(f)
	default:
		return fmt.Errorf("%w: unknown keys command %q; %s", errUsage, sub, keysUsage)
	}
	positional, err := parseInterleaved(f, args)
	if err != nil {
		return err
	}
	var key string
	switch {
	case sub == "list" && len(positional) > 0:
		return fmt.Errorf("%w: keys list takes no KEY (got %q)", errUsage, positional[0])
	case sub == "list":
	case email == "":
		return fmt.Errorf("%w: keys %s needs --user EMAIL", errUsage, sub)
	case len(positional) == 0:
		return fmt.Errorf("%w: keys %s needs the idempotency KEY: payments keys %s --user EMAIL KEY", errUsage, sub, sub)
	case len(positional) > 1:
		return fmt.Errorf("%w: keys %s takes one KEY, got %d", errUsage, sub, len(positional))
	default:
		key = positional[0]
	}
	st, err := keyadmin.ParseState(state)
	if sub == "list" && err != nil {
		return fmt.Errorf("%w: --state %v", errUsage, err)
	}
	if sub == "list" && limit < 1 {
		return fmt.Errorf("%w: --limit is %d: it must be at least 1", errUsage, limit)
	}
	if sub == "retry" {
		if err := cfg.validateEngine(); err != nil {
			return err
		}
		if err := cfg.requireStripe(); err != nil {
			return err
		}
	}

	log := newLogger(stderr, cfg.LogLevel)
	if sub == "retry" { // the retry's attempt is traced as the completer's is
		flushTraces, err := startTracing(ctx, "keys", log)
		if err != nil {
			return err
		}
		defer flushTraces()
	}
	dbURL, stopDB, err := keysDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopDB()
	admin, closeAdmin, err := newKeyAdmin(ctx, cfg, dbURL, sub == "retry", log)
	if err != nil {
		return err
	}
	defer closeAdmin()

	switch sub {
	case "list":
		keys, err := admin.List(ctx, keyadmin.ListParams{State: st, UserEmail: email, Limit: limit})
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, struct {
				Keys []keyadmin.Summary `json:"keys"`
			}{keys})
		}
		return printKeyList(stdout, st, keys)
	case "show":
		story, err := admin.Show(ctx, email, key)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, story)
		}
		return printKeyStory(stdout, story)
	default:
		return retryKey(ctx, stdout, admin, email, key)
	}
}

// parseInterleaved parses flags given before and after the positional
// arguments (`show --user E KEY --json`), which flag.Parse alone stops at.
func parseInterleaved(f *flags, args []string) ([]string, error) {
	var positional []string
	for {
		if err := f.Parse(args); err != nil {
			return nil, err
		}
		if f.NArg() == 0 {
			break
		}
		positional = append(positional, f.Arg(0))
		args = f.Args()[1:]
	}
	return positional, errors.Join(f.envErrs...)
}

// validateEngine is validate's part for the settings a retry uses.
func (c config) validateEngine() error {
	var errs []error
	if c.KeyTTL <= 0 {
		errs = append(errs, fmt.Errorf("PAYMENTS_IDEMPOTENCY_KEY_TTL (--idempotency-key-ttl) is %v: it must be positive", c.KeyTTL))
	}
	if c.LockTimeout < minLockTimeout {
		errs = append(errs, fmt.Errorf("PAYMENTS_LOCK_TIMEOUT (--lock-timeout) is %v: it must be at least %v", c.LockTimeout, minLockTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

// keysDatabase finds the database of every operator command (keys, users,
// stripe-events): DATABASE_URL, else the server payments dev runs on the
// cluster in --data-dir, else that cluster started here (and stopped by
// the returned func). Starting it while dev runs would shut dev's server
// down, so a running one is always used as it is; and the cluster is
// started only under the data directory's lock (devlock.go), so that a dev
// starting meanwhile waits for nothing of ours, and refuses instead.
func keysDatabase(ctx context.Context, cfg config, log *slog.Logger) (string, func(), error) {
	if cfg.DatabaseURL != "" {
		return cfg.DatabaseURL, func() {}, nil
	}
	clusterDir := filepath.Join(cfg.DataDir, "postgres")
	if url, ok := pglocal.Running(ctx, clusterDir, "payments"); ok {
		return url, func() {}, nil
	}
	if _, err := os.Stat(filepath.Join(clusterDir, "PG_VERSION")); err != nil {
		return "", nil, fmt.Errorf("no database: DATABASE_URL is not set and --data-dir %s holds no cluster "+
			"(start payments dev once to make it, give --data-dir where dev keeps it, or set DATABASE_URL)", cfg.DataDir)
	}
	lock, err := lockDataDir(cfg.DataDir, "payments operator command")
	if err != nil {
		// A dev still starting holds the lock: its server is up in a moment.
		if url, ok := waitForDevDatabase(ctx, clusterDir); ok {
			return url, func() {}, nil
		}
		return "", nil, err
	}
	pg, err := startLocalPostgres(ctx, cfg.DataDir, log)
	if err != nil {
		lock.release()
		return "", nil, err
	}
	return pg.URL("payments"), func() { _ = pg.Stop(); lock.release() }, nil
}

// waitForDevDatabase waits up to a minute (a dev's first start runs initdb
// and the migrations) for the server of the dev that holds the data
// directory's lock to accept connections.
func waitForDevDatabase(ctx context.Context, clusterDir string) (string, bool) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if url, ok := pglocal.Running(ctx, clusterDir, "payments"); ok {
			return url, true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return "", false
}

// newKeyAdmin connects to the database and, for a retry, builds the engine,
// the flows and Stripe as serve does.
func newKeyAdmin(ctx context.Context, cfg config, dbURL string, retry bool, log *slog.Logger) (*keyadmin.Admin, func(), error) {
	appCfg := app.Config{
		DatabaseURL: dbURL, Pool: db.PoolConfig{MaxConns: 4}, Logger: log,
		KeyFilter: keyfilter.Config{Disabled: true}, // a retry finds its key by id
	}
	if retry {
		failpoints, err := failpoint.Parse(cfg.Failpoints)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: PAYMENTS_FAILPOINTS: %v", errUsage, err)
		}
		stripe, err := newStripeClient(cfg, log)
		if err != nil {
			return nil, nil, err
		}
		appCfg.Stripe, appCfg.Failpoints = stripe, failpoints
		appCfg.KeyTTL, appCfg.LockTimeout, appCfg.StripeSpentKeyGrace = cfg.KeyTTL, cfg.LockTimeout, cfg.StripeSpentKeyGrace
	}
	a, err := app.New(ctx, appCfg)
	if err != nil {
		return nil, nil, err
	}
	var completer *recovery.Completer
	if retry {
		completer = recovery.NewCompleter(recovery.CompleterConfig{Engine: a.Engine})
	}
	return keyadmin.New(a.Pool, a.Engine.Flows(), completer), a.Close, nil
}

func retryKey(ctx context.Context, stdout io.Writer, admin *keyadmin.Admin, email, key string) error {
	resp, err := admin.Retry(ctx, email, key)
	switch {
	case errors.Is(err, recovery.ErrNeedsAttention):
		return fmt.Errorf("key %q of %s still needs attention: it is past Stripe's idempotency window and Stripe has no trace of its call; "+
			"find out at Stripe what happened before retrying again", key, email)
	case recovery.IsTransient(err):
		return fmt.Errorf("key %q of %s is not finished: %w; it stays at its recovery point: retry again later, or let the completer", key, email, err)
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "Key %q of %s is finished: its answer, %d, is stored and replayed to every retry.\n", key, email, resp.Status)
	fmt.Fprintf(stdout, "%s\n", resp.Body)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printKeyList(w io.Writer, st keyadmin.State, keys []keyadmin.Summary) error {
	if len(keys) == 0 {
		_, err := fmt.Fprintf(w, "No key is %s.\n", strings.ReplaceAll(string(st), "_", " "))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tKEY\tPATH\tRECOVERY POINT\tAGE\tATTEMPTS\tLAST ERROR")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%d\t%s\n", k.User, k.Key, k.Method, k.Path, pointAndMarks(k),
			ageText(k.AgeSeconds), k.Attempts, orDash(k.LastError))
	}
	return tw.Flush()
}

// pointAndMarks is the recovery point, with what else holds the key there.
func pointAndMarks(k keyadmin.Summary) string {
	s := k.RecoveryPoint
	switch {
	case k.Locked && k.LockOverdue:
		s += " (held until " + timeText(*k.LockExpiresAt) + "; its holder may have died)"
	case k.Locked:
		s += " (locked)"
	}
	if k.NeedsAttentionSince != nil {
		s += " (needs attention)"
	}
	return s
}

func printKeyStory(w io.Writer, s *keyadmin.Story) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Key\t%s (user %s, row %s)\n", s.Key, s.User, s.ID)
	fmt.Fprintf(tw, "Request\t%s %s (flow %s)\n", s.Method, s.Path, s.Flow)
	fmt.Fprintf(tw, "Parameters\t%s\n", s.Params)
	fmt.Fprintf(tw, "Began\t%s (%s ago)\n", timeText(s.Created), ageText(s.AgeSeconds))
	fmt.Fprintf(tw, "Recovery point\t%s\n", s.RecoveryPoint)
	fmt.Fprintf(tw, "Attempts\t%d (of them by the completer: %d); the last began %s\n", s.Attempts, s.CompleterAttempts, timeText(s.LastRun))
	lock := "free"
	switch {
	case s.Locked && s.LockOverdue:
		lock = "held until " + timeText(*s.LockExpiresAt) + ": the process executing the request has not renewed it for over half its lifetime and may have died; " +
			"nothing can take the key over before then"
	case s.Locked:
		lock = "held until " + timeText(*s.LockExpiresAt) + ": a process is executing the request (and renews the lock while it does)"
	}
	fmt.Fprintf(tw, "Lock\t%s\n", lock)
	if s.NeedsAttentionSince != nil {
		fmt.Fprintf(tw, "Needs attention\tsince %s\n", timeText(*s.NeedsAttentionSince))
	}
	fmt.Fprintf(tw, "Last error\t%s\n", orDash(s.LastError))
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nPhases committed (audit trail):\n")
	if len(s.Phases) == 0 {
		fmt.Fprintf(w, "  none yet\n")
	}
	for _, p := range s.Phases {
		fmt.Fprintf(tw, "  %s\t%s\t%s %s\t%s\n", timeText(p.At), p.Action, p.ResourceType, p.ResourceID, p.Data)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nStripe idempotency keys (derived from the row id and the step):\n")
	if len(s.StripeKeys) == 0 {
		fmt.Fprintf(w, "  none: the flow makes no Stripe call\n")
	}
	for _, k := range s.StripeKeys {
		spent := ""
		if k.SpentSince != nil {
			spent = "spent since " + timeText(*k.SpentSince)
		}
		fmt.Fprintf(tw, "  %s\t%s\tgeneration %d\t%s\n", k.Step, k.Key, k.Generation, spent)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if s.Response == nil {
		_, err := fmt.Fprintf(w, "\nStored answer: none yet (the request is unfinished; `payments keys retry` drives it now)\n")
		return err
	}
	_, err := fmt.Fprintf(w, "\nStored answer: %d, replayed until %s\n  %s\n", s.Response.Status, timeText(*s.ExpiresAt), s.Response.Body)
	return err
}

func ageText(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}

func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
