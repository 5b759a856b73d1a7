package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// The methods below call the sim's test/admin endpoints (/sim/...). A real
// PSP has none of them: they exist for demos (`saldo dev` paying a cob),
// audits ("was anyone paid twice?") and tests against a sim running in
// another process (`saldo sim-provider`).

// PayCob plays a payer paying the cob with this txid
// (POST /sim/cobs/{txid}/pay). Errors wrap ErrCobNotFound, ErrCobExpired or
// ErrCobPaid when the sim refused.
func (p *Provider) PayCob(ctx context.Context, txid string) (Operation, error) {
	ex := p.client.Do(ctx, http.MethodPost, p.baseURL+"/sim/cobs/"+url.PathEscape(txid)+"/pay", nil, []byte(`{}`))
	if ex.Err != nil {
		return Operation{}, fmt.Errorf("sim: pay cob %s: %w", txid, ex.Err)
	}
	switch ex.StatusCode {
	case http.StatusOK:
		var op Operation
		if err := json.Unmarshal(ex.Body, &op); err != nil {
			return Operation{}, fmt.Errorf("sim: pay cob %s: %w", txid, err)
		}
		return op, nil
	case http.StatusNotFound:
		return Operation{}, fmt.Errorf("%w: %s", ErrCobNotFound, txid)
	case http.StatusGone:
		return Operation{}, fmt.Errorf("%w: %s", ErrCobExpired, txid)
	case http.StatusConflict:
		return Operation{}, fmt.Errorf("%w: %s", ErrCobPaid, txid)
	}
	return Operation{}, fmt.Errorf("sim: pay cob %s: status %d", txid, ex.StatusCode)
}

// Oracle lists every operation the sim executed for reference
// (GET /sim/oracle/{reference}), with idempotency keys and no lookup lag.
func (p *Provider) Oracle(ctx context.Context, reference string) ([]Operation, error) {
	var body struct {
		Operations []Operation `json:"operations"`
	}
	if err := p.adminGet(ctx, "/sim/oracle/"+url.PathEscape(reference), &body); err != nil {
		return nil, err
	}
	return body.Operations, nil
}

// AllOperations lists every operation the sim executed, in execution order,
// each with whether it moved money (GET /sim/operations).
func (p *Provider) AllOperations(ctx context.Context) ([]OracleOperation, error) {
	var body struct {
		Operations []OracleOperation `json:"operations"`
	}
	if err := p.adminGet(ctx, "/sim/operations", &body); err != nil {
		return nil, err
	}
	return body.Operations, nil
}

// SetRandomFaults replaces the sim's random fault profile
// (PUT /sim/random-faults), given in ParseFaultProfile's form; "" turns
// random faults off.
func (p *Provider) SetRandomFaults(ctx context.Context, profile string) error {
	ex := p.client.Do(ctx, http.MethodPut, p.baseURL+"/sim/random-faults", nil, []byte(profile))
	if ex.Err != nil {
		return fmt.Errorf("sim: PUT /sim/random-faults: %w", ex.Err)
	}
	if ex.StatusCode != http.StatusOK {
		return fmt.Errorf("sim: PUT /sim/random-faults: status %d: %s", ex.StatusCode, ex.Body)
	}
	return nil
}

// Duplicates lists the references with more than one money-moving operation
// (GET /sim/duplicates). Empty is the goal.
func (p *Provider) Duplicates(ctx context.Context) ([]string, error) {
	var body struct {
		References []string `json:"references"`
	}
	if err := p.adminGet(ctx, "/sim/duplicates", &body); err != nil {
		return nil, err
	}
	return body.References, nil
}

func (p *Provider) adminGet(ctx context.Context, path string, v any) error {
	ex := p.client.Do(ctx, http.MethodGet, p.baseURL+path, nil, nil)
	if ex.Err != nil {
		return fmt.Errorf("sim: GET %s: %w", path, ex.Err)
	}
	if ex.StatusCode != http.StatusOK {
		return fmt.Errorf("sim: GET %s: status %d", path, ex.StatusCode)
	}
	if err := json.Unmarshal(ex.Body, v); err != nil {
		return fmt.Errorf("sim: GET %s: %w", path, err)
	}
	return nil
}
