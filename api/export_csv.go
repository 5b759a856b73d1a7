package api

import (
	"bufio"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/saldo/saldo/ledger"
)

// csvHeader is the first line of the ledger's CSV export.
const csvHeader = "transaction_id,leg,account_code,seq,amount,currency,balance_after,posted_at,cause_kind,cause_id,hash\n"

// exportAccountCSV streams one account's postings in [from, to) as CSV
// (cause columns empty): each row is appended to one reused line buffer
// and written through a 64 KiB buffer, so memory stays constant whatever
// the account's length (issue 19). Until the first row, an error is a
// problem answer; after it, the connection is aborted so a client cannot
// take a cut export for a whole one.
func (s *Server) exportAccountCSV(w http.ResponseWriter, r *http.Request, db ledger.DBTX, code string, from, to time.Time) {
	bw := bufio.NewWriterSize(w, 64<<10)
	line := make([]byte, 0, 512)
	started := false
	start := func() {
		started = true
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="saldo-ledger.csv"`)
		w.WriteHeader(http.StatusOK)
		_, _ = bw.WriteString(csvHeader)
	}
	err := ledger.StreamPostings(r.Context(), db, code, from, to, func(acc ledger.Account, p *ledger.ExportRow) error {
		if !started {
			start()
		}
		line = strconv.AppendInt(line[:0], p.TransactionID, 10)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(p.Leg), 10)
		line = append(line, ',')
		line = append(line, acc.Code...) // owner_kind/owner_id/purpose/CUR: never needs quoting
		line = append(line, ',')
		line = strconv.AppendInt(line, p.Seq, 10)
		line = append(line, ',')
		line = append(line, p.Amount...)
		line = append(line, ',')
		line = append(line, acc.Currency.Code()...)
		line = append(line, ',')
		line = append(line, p.BalanceAfter...)
		line = append(line, ',')
		line = p.PostedAt.UTC().AppendFormat(line, time.RFC3339Nano)
		line = append(line, ",,,"...)
		line = hex.AppendEncode(line, p.Hash)
		line = append(line, '\n')
		_, err := bw.Write(line)
		return err
	})
	if err != nil && !started {
		s.problem(w, r, err)
		return
	}
	if err != nil {
		s.log.ErrorContext(r.Context(), "api: csv export aborted", "account", code, "error", err)
		panic(http.ErrAbortHandler)
	}
	if !started {
		start()
	}
	if err := bw.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
}
