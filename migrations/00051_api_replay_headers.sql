-- +goose Up
-- Replayed idempotent responses carry the headers the first one had
-- (Location), not only its status and body.
ALTER TABLE idempotent_requests ADD COLUMN response_headers jsonb;
