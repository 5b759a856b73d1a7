package ledger

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"
)

// A seal is the ledger's external anchor (R22, R23): each account's chain
// head (its newest sequence number, that posting's hash and the balance
// after it) written to a file an auditor keeps outside the database.
//
// The hash chains show that history was altered by someone who could
// bypass the ledger's append-only triggers (the tables' owner), but such a
// person could also rewrite a whole chain consistently, from the first
// changed posting to the account's head, and Verify would find nothing
// wrong. A seal taken before the rewrite catches it: the posting at each
// sealed sequence number must still have the sealed hash, and a posting's
// hash covers every posting of its account before it, so history up to
// every sealed head is what it was when the seal was taken, as far as the
// account's chain covers it (a v1 chain, accounts opened before migration
// 00108, leaves out a transaction's cause and key). What was written after
// the seal, and accounts opened after it, are vouched for by the chains
// (and by the next seal), not by this one.
//
// The file is JSON lines, so it is written and checked at constant memory
// however many accounts the ledger has:
//
//	{"format":"saldo-ledger-seal/1","taken_at":"...","database":"saldo"}
//	{"id":1,"code":"merchant/m_1/available/BRL","chain_version":2,"seq":12,"hash":"<hex>","balance":"10.00"}
//	...
//	{"accounts":2,"digest":"<hex>"}
//
// The digest is the sha256 of every line before the last (newlines
// included): a damaged or edited file is refused as such, and an auditor
// may publish the digest alone (in a ticket, a signed mail) to show later
// that the file is the one taken that day. The digest does not make the
// file trustworthy by itself: whoever keeps the file must keep it out of
// reach of those it checks (another team's storage, write-once media).

// SealFormat is the first line's format: this file's layout and meaning.
const SealFormat = "saldo-ledger-seal/1"

// sealHeader is a seal's first line.
type sealHeader struct {
	Format   string    `json:"format"`
	TakenAt  time.Time `json:"taken_at"`
	Database string    `json:"database"`
}

// sealAccount is one account's line: its identity and chain head.
type sealAccount struct {
	ID           int64  `json:"id"`
	Code         string `json:"code"`
	ChainVersion int    `json:"chain_version"`
	// Seq is the account's newest sequence number when sealed (0: no
	// posting yet), Hash that posting's hash (for a v2 account without
	// postings, its genesis; for a v1 account without, empty), Balance the
	// balance after it.
	Seq     int64  `json:"seq"`
	Hash    string `json:"hash"`
	Balance string `json:"balance"`
}

// sealTrailer is a seal's last line.
type sealTrailer struct {
	Accounts int64  `json:"accounts"`
	Digest   string `json:"digest"`
}

// SealSummary describes a seal written or checked.
type SealSummary struct {
	TakenAt  time.Time
	Database string
	Accounts int64
	// Digest is the hex sha256 of the file's lines before its last.
	Digest string
}

// WriteSeal writes the ledger's seal, as of now, to w: every account's
// chain head, read by one statement (one snapshot), streamed at constant
// memory. Only reads: any role that may read ledger_accounts may take it
// (saldo's read-only role does).
func WriteSeal(ctx context.Context, db DBTX, w io.Writer, now time.Time) (SealSummary, error) {
	var dbName string
	if err := db.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
	}
	sum := SealSummary{TakenAt: now.UTC(), Database: dbName}
	h := sha256.New()
	bw := bufio.NewWriterSize(w, 64<<10)
	line := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b = append(b, '\n')
		h.Write(b)
		_, err = bw.Write(b)
		return err
	}
	if err := line(sealHeader{Format: SealFormat, TakenAt: sum.TakenAt, Database: dbName}); err != nil {
		return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
	}
	rows, err := db.Query(ctx, `SELECT id, code, chain_version, last_seq, last_hash, balance::text
		FROM ledger_accounts ORDER BY id`)
	if err != nil {
		return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
	}
	defer rows.Close()
	var a sealAccount
	var head []byte
	for rows.Next() {
		if err := rows.Scan(&a.ID, &a.Code, &a.ChainVersion, &a.Seq, &head, &a.Balance); err != nil {
			return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
		}
		a.Hash = hex.EncodeToString(head)
		if err := line(a); err != nil {
			return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
		}
		sum.Accounts++
	}
	if err := rows.Err(); err != nil {
		return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
	}
	sum.Digest = hex.EncodeToString(h.Sum(nil))
	b, err := json.Marshal(sealTrailer{Accounts: sum.Accounts, Digest: sum.Digest})
	if err != nil {
		return SealSummary{}, err
	}
	if _, err := bw.Write(append(b, '\n')); err != nil {
		return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return SealSummary{}, fmt.Errorf("ledger: seal: %w", err)
	}
	return sum, nil
}

// Violations VerifySeal reports (Report's kinds are Verify's).
const (
	// ViolationSealAccountMissing: an account in the seal is gone, or
	// holds another code or chain version than when sealed.
	ViolationSealAccountMissing ViolationKind = "seal_account_missing"
	// ViolationSealShortened: an account's history is shorter than when
	// sealed (postings deleted).
	ViolationSealShortened ViolationKind = "seal_history_shortened"
	// ViolationSealMismatch: the posting at an account's sealed sequence
	// number (or, for one sealed without postings, its genesis) no longer
	// has the sealed hash or balance: history before the seal was
	// rewritten, even if its chain is consistent again.
	ViolationSealMismatch ViolationKind = "seal_mismatch"
)

// ErrBadSeal: the seal file cannot be read as a seal (not one, damaged,
// edited or cut short). Nothing about the ledger is known from it.
var ErrBadSeal = errors.New("ledger: not a usable seal")

// sealBalance is a balance as a seal writes it (numeric's text).
var sealBalance = regexp.MustCompile(`^-?[0-9]{1,40}(\.[0-9]{1,20})?$`)

// sealBatch is how many sealed accounts one statement of VerifySeal checks.
const sealBatch = 5000

// maxSealLine bounds one line of a seal: an account's code is at most a
// few hundred bytes.
const maxSealLine = 64 << 10

// VerifySeal checks the ledger against the seal read from r: every sealed
// account still exists with its code and chain version, its history is at
// least as long as sealed, and the posting at its sealed sequence number
// still has the sealed hash and balance (for one sealed without postings,
// the v2 genesis or v1 empty head it had). It reports what differs in the
// returned Report (Accounts: how many sealed accounts it checked; at most
// MaxReportedViolations listed); a file that is not a complete, unedited
// seal is ErrBadSeal and nothing is reported. Run it with Verify: the seal
// vouches for the heads, Verify's chains for everything between.
func VerifySeal(ctx context.Context, db DBTX, r io.Reader) (SealSummary, Report, error) {
	start := time.Now()
	rep := Report{Counts: map[ViolationKind]int64{}}
	var sum SealSummary
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSealLine)
	h := sha256.New()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSeal, fmt.Sprintf(format, args...))
	}
	next := func() ([]byte, bool) {
		if !sc.Scan() {
			return nil, false
		}
		return sc.Bytes(), true
	}
	first, ok := next()
	if !ok {
		if err := sc.Err(); err != nil {
			return sum, rep, bad("%v", err)
		}
		return sum, rep, bad("the file is empty")
	}
	var hdr sealHeader
	if err := strictJSON(first, &hdr); err != nil || hdr.Format != SealFormat {
		return sum, rep, bad("the first line is not a %s header", SealFormat)
	}
	h.Write(first)
	h.Write([]byte{'\n'})
	sum.TakenAt, sum.Database = hdr.TakenAt, hdr.Database

	var batch []sealAccount
	var lastID int64
	var trailer *sealTrailer
	for n := 2; ; n++ {
		b, ok := next()
		if !ok {
			break
		}
		if trailer != nil {
			return sum, rep, bad("line %d follows the seal's last line", n)
		}
		if bytes.HasPrefix(b, []byte(`{"accounts":`)) {
			var t sealTrailer
			if err := strictJSON(b, &t); err != nil {
				return sum, rep, bad("line %d: %v", n, err)
			}
			trailer = &t
			continue
		}
		h.Write(b)
		h.Write([]byte{'\n'})
		var a sealAccount
		if err := strictJSON(b, &a); err != nil {
			return sum, rep, bad("line %d: %v", n, err)
		}
		if _, err := hex.DecodeString(a.Hash); err != nil || a.ID <= lastID || a.Seq < 0 || a.Code == "" || !sealBalance.MatchString(a.Balance) {
			return sum, rep, bad("line %d is not an account's head in id order", n)
		}
		lastID = a.ID
		batch = append(batch, a)
		sum.Accounts++
		if len(batch) == sealBatch {
			if err := checkSealBatch(ctx, db, batch, &rep); err != nil {
				return sum, rep, err
			}
			batch = batch[:0]
		}
	}
	if err := sc.Err(); err != nil {
		return sum, rep, bad("%v", err)
	}
	if trailer == nil {
		return sum, rep, bad("its last line (the account count and digest) is missing: the file was cut short")
	}
	sum.Digest = hex.EncodeToString(h.Sum(nil))
	if trailer.Accounts != sum.Accounts || trailer.Digest != sum.Digest {
		return sum, rep, bad("its digest or account count does not match its lines (damaged or edited): %d accounts, digest %s; the file says %d, %s",
			sum.Accounts, sum.Digest, trailer.Accounts, trailer.Digest)
	}
	// Only a whole, unedited file is checked against the ledger's last
	// batch: every earlier batch was too, and a bad file after them
	// reports nothing (rep is dropped with the error above).
	if len(batch) > 0 {
		if err := checkSealBatch(ctx, db, batch, &rep); err != nil {
			return sum, rep, err
		}
	}
	rep.Accounts = sum.Accounts
	rep.Duration = time.Since(start)
	return sum, rep, nil
}

// strictJSON decodes one line, refusing fields a seal does not have.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// checkSealBatch checks sealed accounts against the ledger in one
// statement and adds what differs to rep.
func checkSealBatch(ctx context.Context, db DBTX, batch []sealAccount, rep *Report) error {
	ids := make([]int64, len(batch))
	codes := make([]string, len(batch))
	versions := make([]int32, len(batch))
	seqs := make([]int64, len(batch))
	hashes := make([][]byte, len(batch))
	balances := make([]string, len(batch))
	for i, a := range batch {
		ids[i], codes[i], versions[i], seqs[i], balances[i] = a.ID, a.Code, int32(a.ChainVersion), a.Seq, a.Balance
		hashes[i], _ = hex.DecodeString(a.Hash)
	}
	// The balance is compared as numeric (a sealed "10.00" is 10); the
	// reader refused a balance that is not a decimal number.
	rows, err := db.Query(ctx, `
		SELECT s.id, s.code, s.seq,
		       CASE WHEN a.id IS NULL THEN 'missing'
		            WHEN a.code <> s.code OR a.chain_version <> s.version THEN 'changed'
		            WHEN a.last_seq < s.seq THEN 'shortened'
		            WHEN s.seq = 0 AND coalesce(a.chain_genesis, '\x'::bytea) <> s.hash THEN 'mismatch'
		            WHEN s.seq = 0 AND s.balance::numeric <> 0 THEN 'mismatch'
		            WHEN s.seq > 0 AND (p.hash IS DISTINCT FROM s.hash
		                 OR p.balance_after IS DISTINCT FROM s.balance::numeric) THEN 'mismatch'
		       END AS problem,
		       coalesce(a.code, ''), coalesce(a.last_seq, 0)
		FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::bytea[], $6::text[])
		     AS s(id, code, version, seq, hash, balance)
		LEFT JOIN ledger_accounts a ON a.id = s.id
		LEFT JOIN ledger_postings p ON p.account_id = s.id AND p.seq = s.seq AND s.seq > 0
		ORDER BY s.id`, ids, codes, versions, seqs, hashes, balances)
	if err != nil {
		return fmt.Errorf("ledger: verify seal: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, seq, nowSeq int64
		var code, nowCode string
		var problem *string
		if err := rows.Scan(&id, &code, &seq, &problem, &nowCode, &nowSeq); err != nil {
			return fmt.Errorf("ledger: verify seal: %w", err)
		}
		if problem == nil {
			continue
		}
		switch *problem {
		case "missing":
			rep.add(Violation{Kind: ViolationSealAccountMissing, AccountCode: code,
				Detail: fmt.Sprintf("account %d (%s) was sealed and is gone", id, code)})
		case "changed":
			rep.add(Violation{Kind: ViolationSealAccountMissing, AccountCode: code,
				Detail: fmt.Sprintf("account %d was sealed as %s and is now %s (or its chain version changed)", id, code, nowCode)})
		case "shortened":
			rep.add(Violation{Kind: ViolationSealShortened, AccountCode: code, Seq: seq,
				Detail: fmt.Sprintf("sealed at sequence %d, its history now ends at %d", seq, nowSeq)})
		default:
			rep.add(Violation{Kind: ViolationSealMismatch, AccountCode: code, Seq: seq,
				Detail: "the posting at the sealed sequence no longer has the sealed hash or balance: history before the seal was rewritten"})
		}
	}
	return rows.Err()
}
