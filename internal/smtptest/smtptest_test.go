package smtptest_test

import (
	"net"
	"net/smtp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/smtptest"
)

func start(t *testing.T, cfg smtptest.Config) *smtptest.Server {
	t.Helper()
	srv, err := smtptest.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	return srv
}

// send uses the standard library's client, which knows nothing of this
// package, so the fake is checked against an independent SMTP client.
func send(srv *smtptest.Server, id string) error {
	msg := "Message-ID: " + id + "\r\nSubject: =?utf-8?q?Re=C3=A7u?=\r\n\r\nhello\r\n"
	return smtp.SendMail(srv.Addr(), nil, "from@example.com", []string{"to@example.com"}, []byte(msg))
}

func TestServer_acceptsAndRecordsMessages(t *testing.T) {
	t.Parallel()
	srv := start(t, smtptest.Config{})
	require.NoError(t, send(srv, "<a@x>"))
	require.NoError(t, send(srv, "<a@x>"))
	require.NoError(t, send(srv, "<b@x>"))

	got := srv.Accepted()
	require.Len(t, got, 3)
	require.Equal(t, "from@example.com", got[0].From)
	require.Equal(t, []string{"to@example.com"}, got[0].To)
	require.Equal(t, "Reçu", got[0].Subject, "decoded from RFC 2047")
	require.Equal(t, "hello\n", got[0].Body, "line ends as the dot reader gives them")
	require.Equal(t, map[string]int{"<a@x>": 2, "<b@x>": 1}, srv.CountByMessageID())
	require.Equal(t, map[string]int{"<a@x>": 2}, srv.Duplicates())
	require.Equal(t, 3, srv.Connections())
}

func TestServer_failsAsManyTimesAsToldThenAccepts(t *testing.T) {
	t.Parallel()
	srv := start(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.Fail, FailTimes: 2}})
	require.ErrorContains(t, send(srv, "<a@x>"), "451")
	require.ErrorContains(t, send(srv, "<a@x>"), "451")
	require.NoError(t, send(srv, "<a@x>"))
	require.Len(t, srv.Accepted(), 1)

	srv.SetBehaviour(smtptest.Behaviour{Mode: smtptest.Fail, FailCode: 554})
	require.ErrorContains(t, send(srv, "<b@x>"), "554")
	require.Len(t, srv.Accepted(), 1)
}

func TestServer_hangsUntilClosed(t *testing.T) {
	t.Parallel()
	srv, err := smtptest.Start(smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.HangOnConnect}})
	require.NoError(t, err)
	conn, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer conn.Close()

	require.NoError(t, conn.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = conn.Read(make([]byte, 1))
	var netErr net.Error
	require.ErrorAs(t, err, &netErr)
	require.True(t, netErr.Timeout(), "no greeting: the server says nothing")
	require.Eventually(t, func() bool { return srv.OpenConnections() == 1 }, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, srv.Close())
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err, "Close drops the hung connection")
	require.False(t, isTimeout(err), "dropped, not timed out")
	require.Zero(t, srv.OpenConnections())
}

func isTimeout(err error) bool {
	netErr, ok := err.(net.Error)
	return ok && netErr.Timeout()
}

func TestServer_slowAnswersTheEndOfDataLate(t *testing.T) {
	t.Parallel()
	srv := start(t, smtptest.Config{Behaviour: smtptest.Behaviour{Mode: smtptest.Accept, Delay: 300 * time.Millisecond}})
	began := time.Now()
	require.NoError(t, send(srv, "<a@x>"))
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
}
