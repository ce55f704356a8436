ALTER TABLE payments RESET (fillfactor);
ALTER TABLE payments ADD CONSTRAINT payments_stripe_payment_intent_key UNIQUE (stripe_payment_intent);
DROP TABLE payment_intents;
