package chaostest

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/example/payments/internal/smtptest"
)

// The mail server the workers send receipts to is a fake one
// (internal/smtptest) that the run makes misbehave, as a real one does now
// and then: slow, hung (before the greeting, after the message, or after
// accepting it), or refusing for a while. What must hold meanwhile (issue 20,
// items 6 and 7; checked by the rules api-budget and receipt-once): the API
// answers within its budget, the completer and the drain go on, and a
// receipt the server accepted is never sent again.

// mailTroubles are the behaviours the run switches between; Accept comes
// back between two troubles.
var mailTroubles = []smtptest.Behaviour{
	{Mode: smtptest.Accept, Delay: 2 * time.Second},
	{Mode: smtptest.Accept, Delay: 5 * time.Second},
	{Mode: smtptest.HangOnConnect},
	{Mode: smtptest.HangOnData},
	{Mode: smtptest.HangAfterAccept},
	{Mode: smtptest.Fail, FailTimes: 3},
	{Mode: smtptest.Fail, FailCode: 554, FailTimes: 2},
}

// troubleMail switches the mail server between trouble and health every few
// seconds until ctx ends, then leaves it healthy, so that every receipt can
// be sent before the run settles.
func troubleMail(ctx context.Context, srv *smtptest.Server, rng *rand.Rand, stats *Stats) {
	defer srv.SetBehaviour(smtptest.Behaviour{Mode: smtptest.Accept})
	for {
		healthy := time.Duration(2+rng.IntN(6)) * time.Second
		select {
		case <-ctx.Done():
			return
		case <-time.After(healthy):
		}
		b := mailTroubles[rng.IntN(len(mailTroubles))]
		srv.SetBehaviour(b)
		stats.Add("mail server troubles: "+troubleName(b), 1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(2+rng.IntN(6)) * time.Second):
		}
		srv.SetBehaviour(smtptest.Behaviour{Mode: smtptest.Accept})
	}
}

func troubleName(b smtptest.Behaviour) string {
	if b.Mode == smtptest.Accept {
		return "slow (" + b.Delay.String() + ")"
	}
	return b.Mode.String()
}
