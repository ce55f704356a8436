package currency_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/currency"
)

// The minimums API.md section 2 names, and the edges around them.
func TestCheckCharge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code   string
		amount int64
		want   error
	}{
		{"usd", 50, nil}, {"usd", 49, currency.ErrAmountTooSmall}, {"usd", 1, currency.ErrAmountTooSmall},
		{"eur", 50, nil}, {"eur", 49, currency.ErrAmountTooSmall},
		{"cad", 49, currency.ErrAmountTooSmall}, {"aud", 49, currency.ErrAmountTooSmall},
		{"chf", 49, currency.ErrAmountTooSmall}, {"nzd", 49, currency.ErrAmountTooSmall},
		{"sgd", 49, currency.ErrAmountTooSmall},
		{"gbp", 30, nil}, {"gbp", 29, currency.ErrAmountTooSmall},
		{"jpy", 50, nil}, {"jpy", 49, currency.ErrAmountTooSmall},
		{"huf", 17499, currency.ErrAmountTooSmall}, {"mxn", 1000, nil},
		{"krw", 1, nil}, // no published minimum: Stripe decides
		{"usd", currency.MaxCharge, nil}, {"usd", currency.MaxCharge + 1, currency.ErrAmountTooLarge},
		{"xyz", 2000, currency.ErrUnsupported}, {"USD", 2000, currency.ErrUnsupported},
		{"kwd", 2000, currency.ErrUnsupported}, {"", 2000, currency.ErrUnsupported},
	} {
		err := currency.CheckCharge(tc.code, tc.amount)
		if tc.want == nil {
			require.NoError(t, err, "%s %d", tc.code, tc.amount)
			continue
		}
		require.ErrorIs(t, err, tc.want, "%s %d", tc.code, tc.amount)
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	usd, _ := currency.Lookup("usd")
	jpy, _ := currency.Lookup("jpy")
	require.Equal(t, "0.50 usd", usd.Format(50))
	require.Equal(t, "50 jpy", jpy.Format(50))
	require.True(t, jpy.ZeroDecimal)
	require.False(t, usd.ZeroDecimal)
}

// publishedMinimums is Stripe's table "Minimum and maximum charge amounts"
// (https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts)
// as the page prints it: settlement currency and minimum charge amount.
var publishedMinimums = []struct{ code, printed string }{
	{"usd", "$0.50"}, {"aed", "2.00 د.إ"}, {"aud", "$0.50"}, {"bgn", "лв1.00"}, {"brl", "R$0.50"},
	{"cad", "$0.50"}, {"chf", "0.50 Fr"}, {"czk", "15.00Kč"}, {"dkk", "2.50-kr."}, {"eur", "€0.50"},
	{"gbp", "£0.30"}, {"hkd", "$4.00"}, {"huf", "175.00 Ft"}, {"inr", "₹0.50"}, {"jpy", "¥50"},
	{"mxn", "$10"}, {"myr", "RM 2"}, {"nok", "3.00-kr."}, {"nzd", "$0.50"}, {"pln", "2.00 zł"},
	{"ron", "lei2.00"}, {"sek", "3.00-kr."}, {"sgd", "$0.50"}, {"thb", "฿10"},
}

// minorUnits reads an amount as Stripe prints it ("15.00Kč", "¥50") in
// minor units: whole units for a zero-decimal currency, hundredths for the
// others.
func minorUnits(t *testing.T, printed string, zeroDecimal bool) int64 {
	t.Helper()
	number := regexp.MustCompile(`[0-9]+(\.[0-9]+)?`).FindString(printed)
	whole, frac, _ := strings.Cut(number, ".")
	if zeroDecimal {
		require.Empty(t, frac, "a zero-decimal amount has no fraction: %s", printed)
		frac = ""
	} else {
		frac = (frac + "00")[:2]
	}
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	require.NoError(t, err, printed)
	return n
}

// TestPublishedMinimums holds the table to Stripe's page, currency by
// currency: one minor unit under the minimum is refused, the minimum is
// accepted. Only these currencies have a minimum of their own.
func TestPublishedMinimums(t *testing.T) {
	t.Parallel()
	published := map[string]bool{}
	for _, p := range publishedMinimums {
		published[p.code] = true
		t.Run(p.code, func(t *testing.T) {
			t.Parallel()
			c, ok := currency.Lookup(p.code)
			require.True(t, ok, "Stripe charges in %s", p.code)
			minimum := minorUnits(t, p.printed, c.ZeroDecimal)
			require.Equal(t, minimum, c.MinCharge, "Stripe's minimum for %s is %s", p.code, p.printed)
			require.ErrorIs(t, currency.CheckCharge(p.code, minimum-1), currency.ErrAmountTooSmall)
			require.NoError(t, currency.CheckCharge(p.code, minimum))
		})
	}
	require.Len(t, published, 24)

	// Every other code has no minimum of its own (1 minor unit).
	letters := "abcdefghijklmnopqrstuvwxyz"
	for _, a := range letters {
		for _, b := range letters {
			for _, c := range letters {
				code := string([]rune{a, b, c})
				if cur, ok := currency.Lookup(code); ok && !published[code] {
					require.EqualValues(t, 1, cur.MinCharge, "%s has a minimum Stripe's table does not give", code)
				}
			}
		}
	}
}

// jpy has no minor unit (docs/API.md section 2): its minimum, 50, is ¥50.
func TestJPYMinimumIsFiftyYen(t *testing.T) {
	t.Parallel()
	jpy, ok := currency.Lookup("jpy")
	require.True(t, ok)
	require.True(t, jpy.ZeroDecimal)
	require.EqualValues(t, 50, jpy.MinCharge)
	require.Equal(t, "50 jpy", jpy.Format(jpy.MinCharge))
}
