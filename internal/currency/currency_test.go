package currency_test

import (
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
