package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics counts requests and times them, labelled by the route pattern
// (never the raw path, whose ids would make every payment its own series).
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// unavailable counts the 503 answers by their problem code: the
	// database could not commit (service_unavailable), Stripe could not be
	// reached or the request was interrupted (payment_processor_unavailable).
	unavailable *prometheus.CounterVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payments_http_requests_total",
			Help: "HTTP requests answered, by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "payments_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by method and route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	m.unavailable = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payments_http_unavailable_total",
		Help: "Requests answered 503, by problem code: service_unavailable (the database could not commit: a failover, a lost synchronous standby, a transaction past PAYMENTS_DB_TX_TIMEOUT) or payment_processor_unavailable.",
	}, []string{"code"})
	for _, code := range []string{"service_unavailable", "payment_processor_unavailable"} {
		m.unavailable.WithLabelValues(code) // exported at 0 from the start, for alerts on its rate
	}
	reg.MustRegister(m.requests, m.duration, m.unavailable)
	return m
}

func (m *httpMetrics) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		method := r.Method
		if !knownMethod(method) {
			method = "other"
		}
		m.requests.WithLabelValues(method, route, strconv.Itoa(ww.Status())).Inc()
		m.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
	})
}

func knownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}
