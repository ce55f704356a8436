package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlCounter is a pgx query and batch tracer that counts, on the client
// side, every statement sent (BEGIN and COMMIT included, failed ones too),
// every round trip (a statement sent alone, or a batch: db.Tx sends several
// statements at once) and every transaction: an explicit BEGIN, or a
// statement run outside one.
type sqlCounter struct {
	statements   atomic.Uint64
	roundTrips   atomic.Uint64
	transactions atomic.Uint64
}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	c.roundTrips.Add(1)
	sql := strings.TrimSpace(data.SQL)
	switch {
	case hasPrefixFold(sql, "begin"):
		c.transactions.Add(1)
	case hasPrefixFold(sql, "commit"), hasPrefixFold(sql, "rollback"):
	case conn.PgConn().TxStatus() == 'I': // idle: the statement is a transaction of its own
		c.transactions.Add(1)
	}
	return ctx
}

func (c *sqlCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sqlCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	return ctx
}

func (c *sqlCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.statements.Add(1)
	if hasPrefixFold(strings.TrimSpace(data.SQL), "begin") {
		c.transactions.Add(1)
	}
}

func (c *sqlCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

type clientCounts struct{ statements, roundTrips, transactions uint64 }

func (c *sqlCounter) snapshot() clientCounts {
	return clientCounts{c.statements.Load(), c.roundTrips.Load(), c.transactions.Load()}
}

// cpuSample is CPU time consumed so far: by this process (clients, HTTP
// server, service and simulator alike), by the PostgreSQL server (the
// postmaster and its children alive at the time), and by the whole machine.
type cpuSample struct {
	at          time.Time
	self        time.Duration
	postgres    time.Duration
	machineBusy time.Duration // user+nice+system+irq+softirq+steal, all cores
	machineAll  time.Duration // the same plus idle and iowait
	iowait      time.Duration
}

// clockTick is USER_HZ, the unit of /proc's CPU times; 100 on every Linux
// this runs on.
const clockTick = 10 * time.Millisecond

func sampleCPU(postmaster int) cpuSample {
	s := cpuSample{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.postgres = processTreeCPU(postmaster)
	if f, err := os.Open("/proc/stat"); err == nil {
		sc := bufio.NewScanner(f)
		if sc.Scan() {
			fields := strings.Fields(sc.Text())
			for i, v := range fields[1:] {
				n, _ := strconv.ParseInt(v, 10, 64)
				d := time.Duration(n) * clockTick
				switch i {
				case 3: // idle
					s.machineAll += d
				case 4: // iowait
					s.machineAll += d
					s.iowait += d
				case 0, 1, 2, 5, 6, 7: // user nice system irq softirq steal
					s.machineAll += d
					s.machineBusy += d
				}
			}
		}
		f.Close()
	}
	return s
}

// processTreeCPU sums the CPU time of pid and its direct children (the
// postmaster's backends and auxiliary processes).
func processTreeCPU(pid int) time.Duration {
	var total time.Duration
	entries, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range entries {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// The command name is in parentheses and may hold spaces: parse after it.
		s := string(raw)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		self, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		ppid, _ := strconv.Atoi(f[1])
		if self != pid && ppid != pid {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(utime+stime) * clockTick
	}
	return total
}
