// Help pages: the guide is rendered by the server (backend/api/help_pages.py);
// this only draws the site header around it.

import { startPage } from "../layout.js";

startPage("help");
