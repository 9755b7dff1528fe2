"""A tiny websocket consumer that proves the path browser -> Daphne -> channel layer -> browser works."""

from __future__ import annotations

from tenants.consumers import TenantScopedJsonConsumer


class PingConsumer(TenantScopedJsonConsumer):
    """Echoes a message back through the channel layer (a group send to its own group), with the active tenant."""

    async def connect(self) -> None:
        if not self.scope["user"].is_authenticated:
            await self.close(code=4401)
            return
        self.group = f"ping.{self.channel_name.replace('!', '-')}"[:99]
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: dict, **kwargs) -> None:
        await self.channel_layer.group_send(self.group, {"type": "ping.echo", "echo": content})

    async def ping_echo(self, event: dict) -> None:
        tenant = self.tenant.slug if self.tenant else None
        await self.send_json({"type": "pong", "tenant": tenant, "echo": event["echo"]})
