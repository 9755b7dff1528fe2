"""Tool packs: small Django apps that bring their own tables, tools and demo data (agents.packs.restaurant)."""
