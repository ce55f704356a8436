package console

import (
	"strings"

	"github.com/example/payments/internal/currency"
)

// symbols are the signs the console writes before an amount, for the
// currencies a reader of this console is likely to meet; every other
// currency is written with its upper-case code after the amount ("12.50
// CHF"). A dollar sign alone is the US dollar's: the others say whose.
var symbols = map[string]string{
	"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥", "inr": "₹", "krw": "₩",
	"cad": "CA$", "aud": "A$", "nzd": "NZ$", "sgd": "S$", "hkd": "HK$", "mxn": "MX$",
	"brl": "R$", "cny": "CN¥",
}

// formatMoney writes amount, in the minor unit of the lower-case currency
// code as the API counts it, in major units with the currency's exponent
// (internal/currency: 2 decimals for usd, none for jpy, 3 for kwd) and its
// symbol: "$20.00" (usd 2000), "¥2,000" (jpy 2000), "-€1,234.56",
// "12.50 CHF". Thousands are grouped with commas.
func formatMoney(amount int64, code string) string {
	code = strings.ToLower(code)
	digits := currency.Decimal(code, amount)
	sign := ""
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	whole, frac, hasFrac := strings.Cut(digits, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if hasFrac {
		b.WriteString("." + frac)
	}
	if s, ok := symbols[code]; ok {
		return sign + s + b.String()
	}
	return sign + b.String() + " " + strings.ToUpper(code)
}
