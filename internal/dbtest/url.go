package dbtest

import (
	"net/url"
	"strings"
)

// replaceDatabase returns connURL with its database name set to dbname. It
// handles both URL and keyword/value connection strings.
func replaceDatabase(connURL, oldName, dbname string) string {
	if u, err := url.Parse(connURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + dbname
		return u.String()
	}
	if oldName != "" && strings.Contains(connURL, "dbname="+oldName) {
		return strings.Replace(connURL, "dbname="+oldName, "dbname="+dbname, 1)
	}
	return strings.TrimSpace(connURL) + " dbname=" + dbname
}
