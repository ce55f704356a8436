package currency

// The table, from Stripe's "Supported currencies" page
// (https://docs.stripe.com/currencies): the presentment currencies of card
// payments, the zero-decimal ones, and the minimum charge amounts.

// minimums are Stripe's published minimum charge amounts, in minor units:
// the table under "Minimum and maximum charge amounts"
// (https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts),
// columns "Settlement Currency" and "Minimum Charge Amount", checked row by
// row on 2026-11-25 (TestPublishedMinimums holds this table to it). It has
// these 24 rows; the comment beside each is the amount as Stripe prints it.
// For a zero-decimal currency (jpy) the minor unit is the whole unit, so
// ¥50 is 50.
//
// Stripe states minimums for the currencies it settles in and asks, for
// any other currency, the equivalent of its account's minimum (0.50 usd for
// a US account) at the day's exchange rate. Rates are not ours to guess, so
// a currency missing here gets no minimum of its own from this table (1
// minor unit), and Stripe has the last word: a charge it finds too small is
// refused by Stripe (amount_too_small) and the payment is failed.
var minimums = map[string]int64{
	"usd": 50,    // $0.50
	"aed": 200,   // 2.00 د.إ
	"aud": 50,    // $0.50
	"bgn": 100,   // лв1.00
	"brl": 50,    // R$0.50
	"cad": 50,    // $0.50
	"chf": 50,    // 0.50 Fr
	"czk": 1500,  // 15.00Kč
	"dkk": 250,   // 2.50-kr.
	"eur": 50,    // €0.50
	"gbp": 30,    // £0.30
	"hkd": 400,   // $4.00
	"huf": 17500, // 175.00 Ft
	"inr": 50,    // ₹0.50
	"jpy": 50,    // ¥50 (zero-decimal)
	"mxn": 1000,  // $10
	"myr": 200,   // RM 2
	"nok": 300,   // 3.00-kr.
	"nzd": 50,    // $0.50
	"pln": 200,   // 2.00 zł
	"ron": 200,   // lei2.00
	"sek": 300,   // 3.00-kr.
	"sgd": 50,    // $0.50
	"thb": 1000,  // ฿10
}

// zeroDecimal are the currencies without a minor unit: an amount counts
// whole units.
var zeroDecimal = map[string]bool{
	"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true, "krw": true, "mga": true,
	"pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true,
}

// supported are the currencies Stripe charges cards in. Three-decimal
// currencies (bhd, jod, kwd, omr, tnd), which Stripe takes only with a last
// digit of 0, are left out: this service does not handle that rule.
var supported = setOf(
	"usd", "aed", "afn", "all", "amd", "ang", "aoa", "ars", "aud", "awg", "azn", "bam", "bbd", "bdt", "bgn",
	"bif", "bmd", "bnd", "bob", "brl", "bsd", "bwp", "byn", "bzd", "cad", "cdf", "chf", "clp", "cny", "cop",
	"crc", "cve", "czk", "djf", "dkk", "dop", "dzd", "egp", "etb", "eur", "fjd", "fkp", "gbp", "gel", "gip",
	"gmd", "gnf", "gtq", "gyd", "hkd", "hnl", "htg", "huf", "idr", "ils", "inr", "isk", "jmd", "jpy", "kes",
	"kgs", "khr", "kmf", "krw", "kyd", "kzt", "lak", "lbp", "lkr", "lrd", "lsl", "mad", "mdl", "mga", "mkd",
	"mmk", "mnt", "mop", "mur", "mvr", "mwk", "mxn", "myr", "mzn", "nad", "ngn", "nio", "nok", "npr", "nzd",
	"pab", "pen", "pgk", "php", "pkr", "pln", "pyg", "qar", "ron", "rsd", "rub", "rwf", "sar", "sbd", "scr",
	"sek", "sgd", "shp", "sle", "sos", "srd", "std", "szl", "thb", "tjs", "top", "try", "ttd", "twd", "tzs",
	"uah", "ugx", "uyu", "uzs", "vnd", "vuv", "wst", "xaf", "xcd", "xof", "xpf", "yer", "zar", "zmw",
)

func setOf(codes ...string) map[string]bool {
	m := make(map[string]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}
