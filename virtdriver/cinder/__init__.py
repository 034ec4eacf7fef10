"""Cinder for a host without a compute service: its client, the attach flow, its audit.

:mod:`.client` talks to Cinder's REST API (keystoneauth or noauth); :mod:`.flow` attaches and
detaches through Cinder's attachments; :mod:`.audit` compares the guests with Cinder.
"""
