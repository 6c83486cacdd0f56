"""What one upstream answer says: its outcome, advice, rate-limit headers, learned windows."""
