package api

import (
	"net/http"

	"github.com/saldo/saldo/ledger"
)

// sealWriter sends the answer's status and headers with the seal's first
// bytes: until then an error can still be a problem answer.
type sealWriter struct {
	w       http.ResponseWriter
	started bool
}

func (sw *sealWriter) Write(b []byte) (int, error) {
	if !sw.started {
		sw.started = true
		sw.w.Header().Set("Content-Type", "application/x-ndjson")
		sw.w.Header().Set("Content-Disposition", `attachment; filename="saldo-ledger-seal.jsonl"`)
		sw.w.Header().Set("Cache-Control", "no-store")
		sw.w.WriteHeader(http.StatusOK)
	}
	return sw.w.Write(b)
}

// ledgerSeal is GET /v1/ledger/seal (auditor, admin): the ledger's seal
// (ledger.WriteSeal), every account's chain head as JSON lines, for an
// auditor to keep outside the database and check later with `saldo audit
// verify --seal FILE` (R22, R23). An error after the first bytes cuts the
// connection; a cut seal lacks its last line and is refused when checked,
// so a partial answer cannot pass for a whole one.
func (s *Server) ledgerSeal(w http.ResponseWriter, r *http.Request) {
	sw := &sealWriter{w: w}
	sum, err := ledger.WriteSeal(r.Context(), s.db(r), sw, s.clock.Now())
	if err != nil && !sw.started {
		s.problem(w, r, err)
		return
	}
	if err != nil {
		s.log.ErrorContext(r.Context(), "api: ledger seal aborted", "error", err)
		panic(http.ErrAbortHandler)
	}
	s.log.InfoContext(r.Context(), "api: ledger seal taken", "accounts", sum.Accounts, "digest", sum.Digest)
}
