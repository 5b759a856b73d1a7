-- +goose Up
-- A refund names the charge it returns (charges arrive in 00040).
ALTER TABLE payouts ADD CONSTRAINT payouts_charge_fk FOREIGN KEY (charge_id) REFERENCES charges (id);
