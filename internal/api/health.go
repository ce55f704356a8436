package api

import (
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/problem"
)

// healthz answers 200 while the process is up: liveness, which a failing
// database must not fail (restarting the process would not help it).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is Ready on the server's pool.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	Ready(s.pool, s.log)(w, r)
}

// Ready is /readyz, of serve and of worker: 200 when the process can
// commit now, proved by a commit (db.ProbeCommit: the server is no
// standby, and a write commits within db.ProbeTimeout, synchronous standby
// included); else 503 service_unavailable with Retry-After, within
// db.ProbeTimeout of the question. A ping would not do: a standby, an old
// primary cut off from its synchronous standby, and a node Patroni is
// demoting all answer one (docs/API.md section 11).
func Ready(pool *pgxpool.Pool, log *slog.Logger) http.HandlerFunc {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if err := db.ProbeCommit(r.Context(), pool, db.ProbeTimeout); err != nil {
			log.WarnContext(r.Context(), "not ready: no commit is possible", slog.String("error", err.Error()))
			problem.Write(w, problem.New(http.StatusServiceUnavailable, problem.ServiceUnavailable,
				"The database cannot commit right now (no primary, a standby, or a commit that does not finish).").
				WithRetryAfter(serviceUnavailableRetryAfter))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}
