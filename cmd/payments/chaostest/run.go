package chaostest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/smtptest"
	"github.com/example/payments/internal/users"
)

// Options are what Run needs besides its Config.
type Options struct {
	// Binary is the payments binary to run.
	Binary string
	// DatabaseURL names a migrated database the run may fill.
	DatabaseURL string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// HA, when set, runs the database's faults during the load (ha.go): the
	// database is make ha's formation. The load ends when its faults are
	// measured, or after Config.Duration, whichever comes first.
	HA *HA
}

// Run is one chaos run:
//
//  1. start the simulator, a mail server, two API instances and two workers
//     on one database, each process with its own settings;
//  2. for cfg.Duration, let cfg.Clients clients run chains of requests
//     while faults are armed at the simulator (on its API and on the
//     webhooks it sends), the mail server misbehaves, and processes are
//     crashed, killed and restarted;
//  3. stop the chaos (disarm every fault, restart any process with a
//     failpoint clean), let every client get the final answer of its last
//     request, then replay every finished request once more;
//  4. wait for the background work to settle, take a snapshot of the
//     database and the simulator, and Check it against the clients' ledger.
//
// The error is for a run that could not be carried out (a process that
// would not start, a database that cannot be read); what the run found is
// in the Report's Violations.
func Run(ctx context.Context, cfg Config, opts Options) (_ *Report, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rep := &Report{Config: cfg, Started: time.Now()}
	logDir := cfg.LogDir
	if logDir == "" {
		dir, err := os.MkdirTemp("", "payments-chaos-")
		if err != nil {
			return nil, err
		}
		logDir = dir
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	rep.LogDir = logDir
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (process logs in %s)", err, logDir)
		}
	}()

	pool, err := db.Open(ctx, opts.DatabaseURL, db.PoolConfig{})
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer pool.Close()
	clientUsers, err := seedUsers(ctx, pool)
	if err != nil {
		return nil, err
	}

	seeds := rand.New(rand.NewPCG(cfg.Seed, 0x6368616f73))
	mail, err := smtptest.Start(smtptest.Config{})
	if err != nil {
		return nil, fmt.Errorf("chaos: starting the mail server: %w", err)
	}
	defer mail.Close()
	cluster, err := StartCluster(ctx, ClusterConfig{Binary: opts.Binary, DatabaseURL: opts.DatabaseURL, LogDir: logDir,
		LockTimeout: cfg.LockTimeout, KeyTTL: cfg.KeyTTL, SMTPURL: mail.URL(), AuthorisationLifetime: cfg.AuthorisationLifetime,
		WebhookDrop: cfg.WebhookDrop},
		cfg.WebhookDuplicates, seeds.Uint64())
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	logf("chaos: seed %d; simulator at %s; API at %s and %s; logs in %s", cfg.Seed, cluster.SimURL,
		cluster.Serve[0].URL(), cluster.Serve[1].URL(), logDir)

	merchants, err := startMerchant()
	if err != nil {
		return nil, fmt.Errorf("chaos: starting the merchants' receiver: %w", err)
	}
	defer merchants.close()
	for _, u := range clientUsers {
		for _, ep := range merchantEndpoints {
			if _, err := merchants.registerEndpoint(ctx, cluster.Serve[0].URL(), u.apiKey, fmt.Sprintf("%s-%d", ep.name, u.id), ep.enabled); err != nil {
				return nil, err
			}
		}
	}

	stats := &Stats{}
	ledger := &Ledger{}
	d := newDriver(cluster.Serve, ledger, stats, cfg.RequestBudget)

	// 2. Chaos.
	stopAt := time.Now().Add(cfg.Duration)
	chaosCtx, stopChaos := context.WithDeadline(ctx, stopAt)
	defer stopChaos()
	cr := &crasher{cluster: cluster, cfg: cfg, rng: rand.New(rand.NewPCG(seeds.Uint64(), 1)), stats: stats, logf: logf}
	var chaos sync.WaitGroup
	faultRNG := rand.New(rand.NewPCG(seeds.Uint64(), 2))
	chaos.Go(func() { injectFaults(chaosCtx, cluster.SimURL, cfg.FaultRate, cfg.LockTimeout, faultRNG, stats, logf) })
	webhookRNG, mailRNG := rand.New(rand.NewPCG(seeds.Uint64(), 3)), rand.New(rand.NewPCG(seeds.Uint64(), 4))
	chaos.Go(func() { injectWebhookFaults(chaosCtx, cluster.SimURL, webhookRNG, stats, logf) })
	chaos.Go(func() { troubleMail(chaosCtx, mail, mailRNG, stats) })
	merchantRNG := rand.New(rand.NewPCG(seeds.Uint64(), 5))
	chaos.Go(func() { troubleMerchant(chaosCtx.Done(), merchants, merchantRNG, stats) })
	endpointRNG := rand.New(rand.NewPCG(seeds.Uint64(), 6))
	chaos.Go(func() { changeEndpoints(chaosCtx, cluster, merchants, clientUsers, endpointRNG, stats, logf) })
	chaos.Go(func() { cr.run(chaosCtx) })
	chaos.Go(func() { progress(chaosCtx, stats, logf) })
	loadDone := make(chan struct{})
	if opts.HA != nil {
		opts.HA.defaults()
		d.watch = opts.HA.observe
		chaos.Go(func() {
			defer stopChaos()
			defer close(loadDone)
			opts.HA.run(ctx, chaosCtx, cluster, logf)
		})
	}

	tag := strconv.FormatUint(cfg.Seed%1_000_000, 36)
	var clients sync.WaitGroup
	for i := range cfg.Clients {
		c := &client{id: i, tag: tag, rng: rand.New(rand.NewPCG(seeds.Uint64(), uint64(i))), d: d, users: clientUsers, think: cfg.Think, keyTTL: cfg.KeyTTL,
			simURL: cluster.SimURL, stop: loadDone}
		clients.Go(func() { c.run(ctx, stopAt) })
	}

	// 3. Stop the chaos; let the clients finish.
	chaos.Wait()
	if err := clearFaults(ctx, cluster.SimURL); err != nil {
		return nil, fmt.Errorf("chaos: disarming the faults: %w", err)
	}
	cr.finish()
	rep.Chaos = time.Since(rep.Started)
	logf("chaos: chaos over after %v; clients finish their last requests", rep.Chaos.Round(time.Second))
	clients.Wait()
	if cfg.KeyTTL == 0 { // with a short TTL, most keys are rightly new again by now
		replayAll(ctx, d, ledger, clientUsers, cfg.Clients, seeds.Uint64())
	}
	rep.Drain = time.Since(rep.Started) - rep.Chaos

	// 4. Settle and check.
	logf("chaos: waiting for the background work to settle")
	settled, settleErr := settle(ctx, pool, cluster.relay, cluster.SimURL, cfg.SettleTimeout, logf)
	rep.Settle = settled
	cr.reviveDead() // a process that died since the chaos ended is a problem too
	violations := cr.violations()
	if settleErr != nil {
		violations = append(violations, Violation{Rule: "settle", Key: "-", Detail: settleErr.Error()})
	}
	snap, err := TakeSnapshot(ctx, pool, cluster.SimURL)
	if err != nil {
		return nil, err
	}
	records := ledger.Records()
	snap.KeysExpire = cfg.KeyTTL > 0
	snap.DatabaseFails = opts.HA != nil
	snap.Arrivals, snap.Redelivered, snap.RedeliveryProblems = merchants.Arrivals(), merchants.Redelivered(), merchants.redeliveryProblems()
	snap.Mail = MailState{Accepted: len(mail.Accepted()), Distinct: len(mail.CountByMessageID()), Duplicates: mail.Duplicates(),
		// A database that fails under the workers (the HA run) is, for a
		// receipt, a killed worker: accepted by the mail server, its record
		// lost with the connection, it is rightly sent again.
		WorkersKilled: cfg.KillWorker || cr.cutSends.Load() || opts.HA != nil}
	violations = append(violations, Check(snap, records)...)
	rep.Violations = violations
	rep.Counters = stats.Snapshot()
	for k, v := range map[string]int64{"webhook deliveries acknowledged": cluster.relay.delivered.Load(),
		"webhook deliveries duplicated": cluster.relay.duplicates.Load(),
		"webhook deliveries dropped":    cluster.relay.dropped.Load(), "webhook deliveries failed (retried by Stripe)": cluster.relay.failed.Load()} {
		rep.Counters[k] = v
	}
	acknowledged := 0
	for _, a := range snap.Arrivals {
		if a.Acknowledged {
			acknowledged++
		}
	}
	rep.Counters["merchant deliveries received"] = int64(len(snap.Arrivals))
	rep.Counters["merchant deliveries acknowledged"] = int64(acknowledged)
	rep.World = countWorld(snap, records)
	rep.World["Stripe events"] = int64(len(snap.Sim.Events))
	rep.World["Stripe events no instance acknowledged"] = int64(cluster.relay.unacknowledged(snap.Sim.Events))
	cluster.Close() // before the logs go: the processes write them until they die
	rep.Total = time.Since(rep.Started)
	if !rep.Failed() && cfg.LogDir == "" {
		_ = os.RemoveAll(logDir)
		rep.LogDir = ""
	}
	return rep, nil
}

// seedUsers seeds the demo users and returns them as the clients' users.
func seedUsers(ctx context.Context, pool *pgxpool.Pool) ([]user, error) {
	if err := users.SeedDemoUsers(ctx, pool); err != nil {
		return nil, fmt.Errorf("chaos: seeding users: %w", err)
	}
	var out []user
	for _, demo := range users.DemoUsers {
		u, err := users.Authenticate(ctx, pool, demo.APIKey)
		if err != nil {
			return nil, fmt.Errorf("chaos: finding %s: %w", demo.Email, err)
		}
		out = append(out, user{id: u.ID, apiKey: demo.APIKey})
	}
	return out, nil
}

// replayAll sends every finished request once more, from parallel workers;
// Check compares the answers with the first ones.
func replayAll(ctx context.Context, d *driver, ledger *Ledger, us []user, workers int, seed uint64) {
	keys := map[int64]string{}
	for _, u := range us {
		keys[u.id] = u.apiKey
	}
	work := make(chan *Record)
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			for r := range work {
				a, ok := d.send(ctx, rng, r, keys[r.UserID])
				if ok {
					ledger.Update(r, func(r *Record) { r.Replays = append(r.Replays, a) })
					d.stats.Add("replays (final sweep)", 1)
				}
			}
		})
	}
	for _, r := range ledger.finished() {
		work <- r
	}
	close(work)
	wg.Wait()
}

// progress logs the counters every ten seconds.
func progress(ctx context.Context, stats *Stats, logf func(string, ...any)) {
	start := time.Now()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c := stats.Snapshot()
			var faults, crashes, kills int64
			for k, v := range c {
				switch {
				case strings.HasPrefix(k, "faults armed: delay longer"):
				case strings.HasPrefix(k, "faults armed: "):
					faults += v
				case strings.HasPrefix(k, "crashes at failpoint: "):
					crashes += v
				case strings.HasPrefix(k, "SIGKILLs: "):
					kills += v
				}
			}
			logf("chaos: %v: %d attempts, %d retries, %d faults, %d failpoint crashes, %d SIGKILLs, %d restarts",
				time.Since(start).Round(time.Second), c["attempts"], c["retries"], faults, crashes, kills, c["restarts"])
		}
	}
}

// maxChurnEndpoints bounds the endpoints changeEndpoints keeps registered.
const maxChurnEndpoints = 4

// changeEndpoints registers and deletes endpoints every few seconds until
// ctx ends, as merchants do: a new one must get every event created after
// it and none from before (even one the event worker writes after it was
// made), a deleted one nothing after its deletion.
func changeEndpoints(ctx context.Context, cluster *Cluster, m *merchant, us []user, rng *rand.Rand, stats *Stats, logf func(string, ...any)) {
	type made struct {
		id  string
		key string
	}
	var live []made
	subscriptions := [][]string{{"*"}, {"payment.*"}, {"refund.*"}, {"payment.canceled", "refund.failed"}}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
		}
		base := cluster.Serve[rng.IntN(len(cluster.Serve))].URL()
		if rng.IntN(4) == 0 {
			m.redeliverLatest(ctx, base, us[rng.IntN(len(us))].apiKey, n, stats, logf)
			continue
		}
		// Deletions keep up with registrations: at most maxChurnEndpoints
		// live at once, so that a long run's events do not fan out to ever
		// more endpoints (ten minutes of unbounded churn left 160,000 deliveries pending).
		if len(live) >= maxChurnEndpoints || (len(live) > 0 && rng.IntN(3) == 0) {
			i := rng.IntN(len(live))
			if err := deleteEndpoint(ctx, base, live[i].key, live[i].id); err != nil {
				if ctx.Err() == nil {
					logf("chaos: deleting an endpoint: %v", err)
				}
				continue
			}
			live = slices.Delete(live, i, i+1)
			stats.Add("merchant endpoints deleted mid-run", 1)
			continue
		}
		u := us[rng.IntN(len(us))]
		id, err := m.registerEndpoint(ctx, base, u.apiKey, fmt.Sprintf("churn%d-%d", n, u.id), subscriptions[rng.IntN(len(subscriptions))])
		if err != nil {
			if ctx.Err() == nil {
				logf("chaos: %v", err)
			}
			continue
		}
		live = append(live, made{id: id, key: u.apiKey})
		stats.Add("merchant endpoints registered mid-run", 1)
	}
}
