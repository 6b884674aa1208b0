"""What people read: terminal, markdown and CSV tables, compare, the leaderboard report."""
